"""One dense scan instead of three, offline: candidates from one combined vector per tool (the weighted sum of
its name, description and parameter vectors) plus the lexical hits, then each field's exact cosine for those
candidates only, z-scored over each field's best `TOP` among them. Against today's three full scans.

Usage: python bench/combined_scan.py EMBEDDINGS.pkl (a bench/embed_cache.py cache; missing texts are embedded)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import bench.offline as offline
from bench.embed_cache import EmbeddingCache
from bench.offline import EvalSet, base_signals, fused_scores, load_demo_set, load_set, metrics, query_scores, zclip
from indexer.documents import build_document
from service.settings import SearchSettings

FIELDS = ("name", "description", "params")


def top_mask(scores: np.ndarray, k: int) -> np.ndarray:
    k = min(k, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    mask = np.zeros(scores.shape, dtype=bool)
    mask[np.arange(scores.shape[0])[:, None], top] = True
    return mask


def evaluate(s: EvalSet, weights: dict[str, float], z: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    per_text = np.where(mask, fused_scores(s, weights, z), -np.inf)
    return metrics(s, query_scores(s, per_text))


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    offline.TOP = SearchSettings().candidates
    d = SearchSettings()
    weights = {"name": d.weight_name, "description": d.weight_description, "params": d.weight_params,
               "lexical": d.weight_lexical}
    for s in (load_set("metatool", 3000, 1), load_set("sealtools", None, 0), load_demo_set()):
        base_signals(cache, s)
        lexical = s.signals["lexical"]
        lex_hits = top_mask(lexical, offline.TOP) & (lexical > 0)
        z = {f: zclip(s.signals[f]) for f in FIELDS}
        z["lexical"] = zclip(lexical, lexical > 0)
        today = lex_hits.copy()
        for f in FIELDS:
            today |= top_mask(s.signals[f], offline.TOP)
        m = evaluate(s, weights, z, today)
        print(f"{s.name:10s} today (3 scans)          R@1 {m['recall@1']:.4f} R@5 {m['recall@5']:.4f} "
              f"NDCG@10 {m['ndcg@10']:.4f}", flush=True)
        queries = cache.embed(s.texts)
        docs = [build_document(t) for t in s.tools]
        field_vectors = {f: cache.embed([getattr(doc, f) for doc in docs]) for f in FIELDS}
        for mix in ((d.weight_name, d.weight_description, d.weight_params), (1.0, 1.0, 1.0), (0.2, 0.6, 0.2)):
            combined = sum(w * field_vectors[f] for w, f in zip(mix, FIELDS, strict=True))
            combined = combined / np.linalg.norm(combined, axis=1, keepdims=True)
            scan = queries @ combined.T
            for pool in (50, 100, 200):
                candidates = top_mask(scan, pool) | lex_hits
                zc = {f: zclip(s.signals[f], candidates) for f in FIELDS}
                zc["lexical"] = z["lexical"]
                m = evaluate(s, weights, zc, candidates)
                print(f"{s.name:10s} combined {mix} pool {pool:3d} R@1 {m['recall@1']:.4f} "
                      f"R@5 {m['recall@5']:.4f} NDCG@10 {m['ndcg@10']:.4f}", flush=True)


if __name__ == "__main__":
    main()
