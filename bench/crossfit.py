"""Cross-fit the fusion weights: tune on one dev set, measure on the other, next to the in-sample best.

Usage: python bench/crossfit.py EMBEDDINGS.pkl (a bench/embed_cache.py cache; missing texts are embedded)"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

from bench.embed_cache import EmbeddingCache
from bench.offline import EvalSet, base_signals, fused_scores, load_set, metrics, query_scores, zclip
from indexer.names import name_verb, query_stems
from service.settings import SearchSettings

GRID = [round(x * 0.1, 1) for x in range(6)]
VERB_WEIGHTS = (0.0, 0.2, 0.4)


def verb_bonus(s: EvalSet) -> np.ndarray:
    """1 where a query's whole text names the verb a tool's name leads with (as the service applies it)."""
    verbs = [name_verb(t.name, t.server) for t in s.tools]
    out = np.zeros((len(s.texts), len(s.tools)))
    for i, rows in enumerate(s.text_rows):
        words = query_stems(s.queries[i].text)
        hit = np.array([bool(v) and v in words for v in verbs], dtype=float)
        for r in rows:
            out[r] = hit
    return out


def prepare(cache: EmbeddingCache, s: EvalSet) -> dict[str, np.ndarray]:
    """Clipped z-scores of every signal, and the verb indicator."""
    base_signals(cache, s)
    z = {k: zclip(v, (v > 0) if k == "lexical" else None) for k, v in s.signals.items()}
    z["name_verb"] = verb_bonus(s)
    return z


def grid() -> list[dict[str, float]]:
    """Weights summing to 1 over the four signals, times the verb weights."""
    out = []
    for wn, wd, wp, wl in itertools.product(GRID, GRID, (0.0, 0.1, 0.2), GRID):
        if abs(wn + wd + wp + wl - 1.0) < 1e-6:
            for wv in VERB_WEIGHTS:
                out.append({"name": wn, "description": wd, "params": wp, "lexical": wl, "name_verb": wv})
    return out


SEAL_GRID = [  # the large set is slow to score: a neighbourhood of the defaults
    {"name": wn, "description": wd, "params": 0.1, "lexical": round(0.9 - wn - wd, 2), "name_verb": wv}
    for wn, wd in ((0.1, 0.45), (0.0, 0.5), (0.2, 0.4), (0.1, 0.3), (0.1, 0.6))
    for wv in (0.0, 0.2, 0.4)
]


def score(s: EvalSet, z: dict[str, np.ndarray], weights: dict[str, float]) -> dict[str, float]:
    return metrics(s, query_scores(s, fused_scores(s, weights, z)))


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    meta, seal = load_set("metatool", 3000, 1), load_set("sealtools", None, 0)
    zm, zs = prepare(cache, meta), prepare(cache, seal)
    d = SearchSettings()
    defaults = {"name": d.weight_name, "description": d.weight_description, "params": d.weight_params,
                "lexical": d.weight_lexical, "name_verb": d.weight_name_verb}
    print(f"defaults {defaults}: metatool {score(meta, zm, defaults)} sealtools {score(seal, zs, defaults)}",
          flush=True)
    best_meta = max(grid(), key=lambda w: (score(meta, zm, w)["recall@5"], score(meta, zm, w)["mrr"]))
    print(
        f"tuned on metatool: {best_meta} in-sample {score(meta, zm, best_meta)} "
        f"cross-fit on sealtools {score(seal, zs, best_meta)}",
        flush=True,
    )
    seal_rows = [(w, score(seal, zs, w)) for w in SEAL_GRID]
    for w, m in seal_rows:
        print(w, m, flush=True)
    best_seal, in_seal = max(seal_rows, key=lambda row: (row[1]["recall@5"], row[1]["mrr"]))
    print(f"tuned on sealtools: {best_seal} in-sample {in_seal} cross-fit on metatool {score(meta, zm, best_seal)}")


if __name__ == "__main__":
    main()
