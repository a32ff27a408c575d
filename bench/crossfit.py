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


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    sets = {"metatool": load_set("metatool", 3000, 1), "sealtools": load_set("sealtools", None, 0)}
    zs = {n: prepare(cache, s) for n, s in sets.items()}
    table = []
    for weights in grid():
        scores = {n: metrics(s, query_scores(s, fused_scores(s, weights, zs[n]))) for n, s in sets.items()}
        table.append((weights, scores))
        print(weights, {n: m["recall@5"] for n, m in scores.items()}, flush=True)
    for tuned, other in (("metatool", "sealtools"), ("sealtools", "metatool")):
        weights, scores = max(table, key=lambda row: (row[1][tuned]["recall@5"], row[1][tuned]["mrr"]))
        print(f"tuned on {tuned}: {weights} in-sample {scores[tuned]} cross-fit on {other} {scores[other]}")
    weights, scores = max(table, key=lambda row: sum(row[1][n]["recall@5"] for n in sets))
    print(f"best mean R@5: {weights} {scores}")


if __name__ == "__main__":
    main()
