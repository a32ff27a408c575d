"""Issue #12, offline: one query map for every catalog, learned from the other dev set's labelled requests.

The per-caller query adapter (service/usage/adapter.py) learns a linear map of the query vector from a caller's own
use. Here the same training (`train_map`, its loss, L2 pull and early stop) runs once on one dev set's labelled
requests (MetaTool: its 18,041 requests outside the 3,000 of `toolscout eval`; Seal-Tools: all 2,054), and the map is
measured on the other set, which it has never seen (its catalog and its requests): whether a map of "how requests
are worded against how tools are described" carries over to an unseen catalog, as a shipped map would have to for a
held-out set. The map of a set measured on that same set is printed too (in-catalog learning: what use teaches).

Usage: python bench/cross_map.py EMBEDDINGS.pkl [L2 PULL ...] (default 0.01; embeds MetaTool's other requests once)"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import numpy as np

from bench.embed_cache import EmbeddingCache
from bench.offline import load_set, metrics
from bench.pool_variants import FIELDS, Data, S, fmt, per_text_scores, prepare, query_scores, unit
from service.usage import adapter
from service.usage.adapter import TrainingSet, train_map

SERVICE = {"centre": 1.0, "part_pool": 50}  # the service's configuration in pool_variants' terms
WEIGHTS = {"name": S.weight_name, "description": S.weight_description, "params": S.weight_params}


def mixed_docs(data: Data) -> np.ndarray:
    """The catalog's centred unit field vectors, weighted as the search weighs their scores."""
    total = sum(WEIGHTS.values())
    return sum((WEIGHTS[f] / total) * unit(data.d[f] - data.d[f].mean(axis=0)) for f in FIELDS).astype(np.float32)


def training_set(cache: EmbeddingCache, name: str, data: Data, exclude: set[str]) -> TrainingSet:
    """Every labelled request of the set but `exclude`, with the rows of its relevant tools."""
    position = {tool_id: i for i, tool_id in enumerate(data.s.ids)}
    labelled = [(q.text, [position[r] for r in q.relevant if r in position]) for q in load_set(name, None, 0).queries]
    labelled = [(text, rows) for text, rows in labelled if rows and text not in exclude]
    vectors = unit(cache.embed([text for text, _ in labelled]).astype(np.float32))
    return TrainingSet(vectors, [np.array(rows) for _, rows in labelled], mixed_docs(data))


def measured(data: Data, matrix: np.ndarray | None) -> dict[str, float]:
    """The service's ranking offline, every text's vector mapped first when a map is given."""
    original = data.q
    if matrix is not None:
        data.q = unit(original @ matrix.T).astype(np.float32)
    try:
        return metrics(data.s, query_scores(data, per_text_scores(data, SERVICE)))
    finally:
        data.q = original


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    sets = {
        "metatool": prepare(cache, load_set("metatool", 3000, 1)),
        "sealtools": prepare(cache, load_set("sealtools", None, 0)),
    }
    for name, data in sets.items():
        print(f"no map | {name} | {fmt(measured(data, None))}", flush=True)
    evaluated = {q.text for q in sets["metatool"].s.queries}
    training = {
        name: training_set(cache, name, data, evaluated if name == "metatool" else set()) for name, data in sets.items()
    }
    for pull in [float(a) for a in sys.argv[2:]] or [adapter.ADAPTER_REG]:
        adapter.ADAPTER_REG = pull
        for name, examples in training.items():
            began = time.perf_counter()
            trained = train_map(examples, 120.0)
            print(
                f"L2 pull {pull}, trained on {name} ({len(examples.queries)} requests, held-out R@5 "
                f"{trained.held_base} -> {trained.held_best}, {time.perf_counter() - began:.0f} s)",
                flush=True,
            )
            if trained.matrix is None:
                continue
            Path(f"cross_map_{name}_{pull}.pkl").write_bytes(pickle.dumps(trained.matrix))
            for other, data in sets.items():
                kind = "same catalog" if other == name else "unseen catalog"
                print(f"  {kind} | {other} | {fmt(measured(data, trained.matrix))}", flush=True)


if __name__ == "__main__":
    main()
