"""Late interaction as a fifth signal, offline: MiniLM's token vectors (before mean pooling) of each text against
each candidate's description tokens, MaxSim (the mean over the text's tokens of the best cosine to a description
token), z-scored over the fused candidates and added with weight W to bench/pool_variants.py's scores (centred
fields, as the service).

Usage: python bench/late_interaction.py EMBEDDINGS.pkl"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from bench import pool_variants as pv
from bench.embed_cache import EmbeddingCache
from bench.offline import load_set, metrics
from indexer.documents import build_document


def token_vectors(model: object, texts: list[str]) -> list[np.ndarray]:
    """Unit token vectors of each text, without [CLS] and [SEP]."""
    out = []
    for start in range(0, len(texts), 256):
        chunk = model.encode(texts[start : start + 256], output_value="token_embeddings", batch_size=64)  # type: ignore[attr-defined]
        for tokens in chunk:
            t = tokens.numpy()[1:-1] if len(tokens) > 2 else tokens.numpy()
            out.append(t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12))
    return out


def maxsim(query: np.ndarray, docs: list[np.ndarray]) -> np.ndarray:
    """MaxSim of one text's tokens against each doc's tokens."""
    flat = np.concatenate(docs)
    starts = np.cumsum([0] + [len(d) for d in docs[:-1]])
    sims = query @ flat.T  # query tokens x all doc tokens
    best = np.maximum.reduceat(sims, starts, axis=1)  # query tokens x docs
    return best.mean(axis=0)


def late_scores(data: pv.Data, q_tokens: list[np.ndarray], d_tokens: list[np.ndarray], union: np.ndarray) -> np.ndarray:
    out = np.zeros(union.shape)
    for r in range(union.shape[0]):
        cols = np.flatnonzero(union[r])
        if len(cols):
            out[r, cols] = maxsim(q_tokens[r], [d_tokens[c] for c in cols])
    return out


def scores_with_late(data: pv.Data, p: dict, late: np.ndarray | None, weight: float) -> np.ndarray:
    """pool_variants.per_text_scores plus the late signal (z over the union) before the verb bonuses."""
    scores, scan = pv.field_scores(data, p)
    lex = data.lexical
    lex_hits = pv.top_mask(lex, pv.S.candidates, lex > 0)
    pool = pv.top_mask(scan, pv.S.pool_candidates) | lex_hits
    hits = {f: pv.top_mask(scores[f], pv.S.candidates, pool) for f in pv.FIELDS}
    union = lex_hits | hits["name"] | hits["description"] | hits["params"]
    total = np.zeros(pool.shape)
    for f in pv.FIELDS:
        total += pv.WEIGHTS[f] * pv.zscore(scores[f], hits[f], union)
    total += pv.WEIGHTS["lexical"] * pv.zscore(lex, lex_hits, union)
    if late is not None and weight:
        total += weight * pv.zscore(late, union, union)
    return pv.verb_bonuses(np.where(union, total, -np.inf), data), union


def main() -> None:
    from sentence_transformers import SentenceTransformer

    from indexer.onnx_export import model_dir

    cache = EmbeddingCache(Path(sys.argv[1]))
    model = SentenceTransformer(str(model_dir("bundled")), device="cpu")
    p = {"centre": 1.0}
    for s in (load_set("metatool", 3000, 1), load_set("sealtools", None, 0)):
        data = pv.prepare(cache, s)
        started = time.perf_counter()
        _, union = scores_with_late(data, p, None, 0.0)
        q_tokens = token_vectors(model, s.texts)
        docs = [build_document(t) for t in s.tools]
        d_tokens = token_vectors(model, [f"{d.name}: {d.description}" for d in docs])
        late = late_scores(data, q_tokens, d_tokens, union)
        print(f"{s.name}: token vectors and MaxSim in {time.perf_counter() - started:.0f} s", flush=True)
        for weight in (0.0, 0.1, 0.2, 0.3, 0.5):
            per_text, _ = scores_with_late(data, p, late, weight)
            m = metrics(s, pv.query_scores(data, per_text))
            print(f"{s.name} late {weight} | {pv.fmt(m)}", flush=True)


if __name__ == "__main__":
    main()
