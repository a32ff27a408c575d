"""Server-aware scoring offline: each tool's fused score blended with its server document's similarity.

Usage: python bench/servers.py EMBEDDINGS.pkl [WEIGHT ...] (a bench/embed_cache.py cache; missing texts are embedded)
Prints R@1/R@5/MRR per dev set (MetaTool 3,000 queries seed 1, Seal-Tools all, the bundled real catalogs) per
server weight, with the service's default fusion weights, z-scores of the server similarity taken over each
text's candidates (the union of every signal's top 100) as the service does. Environment: FORMS=z,pos,zs,raw,
SETS=sealtools,demo, ALL_SERVERS=1 to give servers without an info block a document too (the service does not).
The documents no longer list their tools' names (indexer/servers.py says why)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from bench.crossfit import prepare
from bench.embed_cache import EmbeddingCache
from bench.offline import TOP, EvalSet, fused_scores, load_demo_set, load_set, metrics, query_scores
from indexer.servers import server_document, server_info
from service.settings import SearchSettings

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4)


def candidates(s: EvalSet) -> np.ndarray:
    """Per text, the tools some signal returns (top 100 dense per field, top 100 lexical hits)."""
    mask = np.zeros((len(s.texts), len(s.tools)), dtype=bool)
    rows = np.arange(len(s.texts))[:, None]
    for signal, scores in s.signals.items():
        k = min(TOP, scores.shape[1])
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        hit = np.zeros_like(mask)
        hit[rows, top] = True
        mask |= hit & (scores > 0) if signal == "lexical" else hit
    return mask


def server_signal(cache: EmbeddingCache, s: EvalSet, mask: np.ndarray, form: str = "z") -> np.ndarray:
    """The server signal of every text and tool: `z` the z-score over the text's candidates of the cosine between
    the text and the tool's server document (the service's), `pos` its positive part, `zs` z over the distinct
    servers of the candidates, `raw` the centred cosine."""
    servers = sorted({t.server for t in s.tools})
    info: dict[str, dict[str, str]] = {}
    for tool, raw in zip(s.tools, s.raw, strict=True):
        info.setdefault(tool.server, server_info(raw.get("server_info")))
    docs = cache.embed([server_document(sv, info[sv]) for sv in servers])
    column = {sv: i for i, sv in enumerate(servers)}
    columns = np.array([column[t.server] for t in s.tools])
    by_server = cache.embed(s.texts) @ docs.T
    sims = by_server[:, columns].astype(np.float64)
    if form == "zs":
        out = np.zeros_like(sims)
        for r in range(len(s.texts)):
            present = np.unique(columns[mask[r]])
            values = by_server[r, present]
            std = values.std()
            if len(present) > 1 and std > 1e-9:
                out[r] = (by_server[r, columns] - values.mean()) / std
        return out
    if os.environ.get("ALL_SERVERS") is None:  # as the service: servers without an info block get no document
        described = np.array([bool(info[t.server]) for t in s.tools])
        mask = mask & described[None, :]
        if not described.any():
            return np.zeros_like(sims)
    count = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    mean = np.where(mask, sims, 0).sum(axis=1, keepdims=True) / count
    if form == "raw":
        return sims - mean
    std = np.sqrt(np.where(mask, (sims - mean) ** 2, 0).sum(axis=1, keepdims=True) / count)
    z = np.where(std > 1e-9, (sims - mean) / np.where(std > 1e-9, std, 1.0), 0.0)
    z = np.where(mask, z, 0.0)
    return np.maximum(z, 0.0) if form == "pos" else z


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    weights = [float(w) for w in sys.argv[2:]] or list(WEIGHTS)
    d = SearchSettings()
    base = {
        "name": d.weight_name,
        "description": d.weight_description,
        "params": d.weight_params,
        "lexical": d.weight_lexical,
        "name_verb": d.weight_name_verb,
    }
    sets = [load_set("metatool", 3000, 1), load_set("sealtools", None, 0), load_demo_set()]
    forms = [f for f in os.environ.get("FORMS", "z").split(",") if f]
    for s in sets if os.environ.get("SETS") is None else [x for x in sets if x.name in os.environ["SETS"]]:
        z = prepare(cache, s)
        mask = candidates(s)
        for form in forms:
            z["server"] = server_signal(cache, s, mask, form)
            for w in weights:
                started = time.perf_counter()
                per_text = np.where(mask, fused_scores(s, {**base, "server": w}, z), -np.inf)
                m = metrics(s, query_scores(s, per_text))
                print(
                    f"{s.name:10s} {form:10s} server={w:.2f} R@1 {m['recall@1']:.4f} R@5 {m['recall@5']:.4f} "
                    f"MRR {m['mrr']:.4f} ({time.perf_counter() - started:.1f}s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
