"""Grid-search fusion weights offline on signals collected by collect_signals.py.

Usage: python bench/tune_fusion.py meta.pkl seal.pkl"""

from __future__ import annotations

import itertools
import pickle
import sys

from service.search.evaluation import query_metrics
from service.search.ranking import fuse, max_merge, rank

KEYS = ("recall@1", "recall@5", "ndcg@10", "mrr")


def evaluate(rows: list[dict], weights: dict[str, float], use_parts: bool = True) -> dict[str, float]:
    totals = dict.fromkeys(KEYS, 0.0)
    for row in rows:
        per_text = [fuse(signals, weights) for signals in row["signals"]]
        parts = list(zip(row["texts"][1:], per_text[1:], strict=True)) if use_parts else []
        merged = max_merge(per_text[0], parts) if parts else per_text[0]
        ranked = [c.name for c in rank(merged, row["exact"], 100)]
        metrics = query_metrics(ranked, row["relevant"])
        for k in KEYS:
            totals[k] += metrics[k]
    return {k: round(v / len(rows), 4) for k, v in totals.items()}


def main() -> None:
    sets = {path: pickle.loads(open(path, "rb").read()) for path in sys.argv[1:]}
    grid = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    results = []
    for wn, wd, wp, wl in itertools.product(grid, grid, [0.0, 0.05, 0.1, 0.2], grid):
        if abs(wn + wd + wp + wl - 1.0) > 1e-6:
            continue
        weights = {"name": wn, "description": wd, "params": wp, "lexical": wl}
        scores = {path: evaluate(rows, weights) for path, rows in sets.items()}
        results.append((weights, scores))
        print(weights, scores, flush=True)
    print("\nbest by worst-set R@5:")
    for weights, scores in sorted(results, key=lambda r: -min(s["recall@5"] for s in r[1].values()))[:10]:
        print(weights, scores)


if __name__ == "__main__":
    main()
