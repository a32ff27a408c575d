"""Issue #12's later round, offline: new ways to normalise and to add signals, on bench/pool_variants.py's copy of
the service (centred fields, parts' pool 50), each tuned on one dev set and measured on the other.

Variants (keys of a configuration dict, on top of BASE):
  norm ("mix", a, k)   each signal's z-score mixed with the z-score of its reciprocal rank 1/(k + rank) over its
                       hits: (1 - a) z + a z_rrf (a = 1: rank only)
  norm ("robust", c)   c (s - median) / (1.4826 MAD) over its hits instead of the z-score
  norm ("soft", t, c)  each signal's z replaced by c * n * softmax(z / t) over its hits (n: the hits): the top of a
                       signal counts more than its middle
  norm ("exp", t[, signals]) each signal's (or those signals') z replaced by t (exp(z / t) - 1): the same near 0,
                       convex above; ("exp2", t_dense, t_lexical): each kind its own t
  rows "parts"/"whole"  the norm on a split request's parts only, or on whole texts only
  local beta           centring by (1 - beta) the catalog's mean + beta the mean of the text's 100 best scanned tools
  whole_mix lam        a split request's score (1 - lam) the max-merge + lam the whole text's own score
  qb (bank, beta, T)   query-bank normalisation (QB-Norm's inverted softmax, as a per-tool offset): each dense
                       field's (centred) cosine less beta * T * log(mean over the bank of exp(cos(bank, tool) / T));
                       banks: `desc` (the catalog's other descriptions), `params`, `names`, `other` (the other dev
                       set's requests: a stand-in for a shipped bank of generic requests)
  lexf (wn, wd, wp)    BM25 over the name words, the description and the parameter text, each its own signal
                       (z over its hits among the fused candidates; IDF over that field), added with these weights
  cover (w, power)     the IDF-weighted share of the text's distinct terms found in the tool's lexical document (to
                       that power), z over the fused candidates that match any, added with weight w
  sif (w, a, field)    SIF pooling of MiniLM's token vectors (weights a / (a + p(token)), p from the catalog's
                       documents; the catalog's first principal direction removed) for the text and the tool's
                       description (or name: description) as one more signal with weight w

Usage: python bench/ideas12.py EMBEDDINGS.pkl [GROUP ...] (groups: see GROUPS; `sif` embeds token vectors with
torch once, into EMBEDDINGS.tokens.pkl: about 20 minutes on this machine; IDEAS12_SETS=metatool runs one set)"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench import pool_variants as pv
from bench.embed_cache import EmbeddingCache
from bench.offline import lexical_signal, load_set, metrics
from indexer.documents import build_document
from indexer.lexical import Bm25Encoder

BASE = {"centre": 1.0, "part_pool": 50}
TOKEN_CACHE = Path("tokens.pkl")  # set by main(): beside the embeddings, EMBEDDINGS.tokens.pkl


def rank_z(scores: np.ndarray, hits: np.ndarray, union: np.ndarray, k: float) -> np.ndarray:
    """z-score of 1/(k + rank) over each row's hits (rank 0 = best)."""
    s = np.where(hits, scores, -np.inf)
    order = np.argsort(-s, axis=1, kind="stable")
    rank = np.empty_like(order)
    rank[np.arange(s.shape[0])[:, None], order] = np.arange(s.shape[1])[None, :]
    rr = np.where(hits, 1.0 / (k + rank), 0.0)
    return pv.zscore(rr, hits, union)


def soft(z: np.ndarray, hits: np.ndarray, union: np.ndarray, t: float, c: float) -> np.ndarray:
    zz = np.where(hits, z / t, -np.inf)
    zz = zz - zz.max(axis=1, keepdims=True)
    e = np.where(hits, np.exp(zz), 0.0)
    n = hits.sum(axis=1, keepdims=True)
    p = e / np.maximum(e.sum(axis=1, keepdims=True), 1e-12) * n
    return np.where(union, c * p, 0.0)


def normalised(scores, hits, union, p, signal, parts=None):
    z = pv.zscore(scores, hits, union)
    norm = p.get("norm")
    if not norm or (len(norm) > 2 and norm[0] == "exp" and signal not in norm[2]):
        return z
    if p.get("rows"):  # the transform on the parts' rows only ("parts") or the whole texts' only ("whole")
        rows = parts if p["rows"] == "parts" else ~parts
        out = z.copy()
        out[rows] = normalised(scores[rows], hits[rows], union[rows], {"norm": norm}, signal)
        return out
    if norm[0] == "mix":
        return (1 - norm[1]) * z + norm[1] * rank_z(scores, hits, union, norm[2])
    if norm[0] == "robust":  # (s - median) / (1.4826 MAD) over the hits, the rest at the lowest hit's value
        h = np.where(hits, scores.astype(np.float64), np.nan)
        med = np.nanmedian(h, axis=1, keepdims=True)
        mad = 1.4826 * np.nanmedian(np.abs(h - med), axis=1, keepdims=True)
        ok = np.isfinite(mad) & (mad > 1e-9)
        r = np.where(ok, (scores - np.where(ok, med, 0.0)) / np.where(ok, mad, 1.0), 0.0)
        floor = np.where(hits, r, np.inf).min(axis=1, keepdims=True)
        floor = np.where(np.isfinite(floor) & ok, floor, 0.0)
        return np.where(union, np.where(hits, r, floor), 0.0) * norm[1]
    if norm[0] == "soft":
        return soft(z, hits, union, norm[1], norm[2])
    if norm[0] == "exp":  # t (exp(z / t) - 1): z near 0, convex above (t -> inf: z)
        return np.where(union, norm[1] * np.expm1(np.minimum(z, 50.0) / norm[1]), 0.0)
    if norm[0] == "exp2":  # the dense fields at t = norm[1], lexical at t = norm[2]
        t = norm[2] if signal == "lexical" else norm[1]
        return np.where(union, t * np.expm1(np.minimum(z, 50.0) / t), 0.0)
    raise ValueError(norm)


def qb_offsets(data: pv.Data, bank: np.ndarray, docs: np.ndarray, t: float, self_bank: bool) -> np.ndarray:
    sims = bank @ docs.T  # bank x tools
    if self_bank:
        np.fill_diagonal(sims, -np.inf)
    m = sims.max(axis=0)
    return m + t * np.log(np.mean(np.exp((sims - m) / t), axis=0))


def local_centred(data: pv.Data, scan: np.ndarray, beta: float) -> dict[str, np.ndarray]:
    """Each field's cosine to d - m, m = (1 - beta) (the catalog's mean) + beta (the mean of the text's 100 best
    scanned tools): (q.d - q.m) / |d - m|."""
    near = pv.top_mask(scan, pv.S.pool_candidates).astype(np.float64)
    near /= near.sum(axis=1, keepdims=True)
    out = {}
    for f in pv.FIELDS:
        d = data.d[f].astype(np.float64)
        m = (1 - beta) * d.mean(axis=0)[None, :] + beta * (near @ d)  # texts x dim
        qd = data.q @ d.T
        qm = (data.q * m).sum(axis=1, keepdims=True)
        dm = m @ d.T
        mm = (m * m).sum(axis=1, keepdims=True)
        norm = np.sqrt(np.maximum(1 - 2 * dm + mm, 1e-12))
        out[f] = (qd - qm) / norm
    return out


def per_text(data: pv.Data, p: dict) -> np.ndarray:
    scores, scan = pv.field_scores(data, p)
    if p.get("local"):
        scores = local_centred(data, scan, p["local"])
    if p.get("qb"):
        bank_name, beta, t, fields = p["qb"]
        for f in fields:
            d = data.d[f]
            docs = pv.unit(d - d.mean(axis=0))
            bank = data.banks[bank_name]
            off = qb_offsets(data, bank, docs, t, bank_name == f"self_{f}")
            scores[f] = scores[f] - beta * off[None, :]
    lex = data.lexical
    lex_hits = pv.top_mask(lex, pv.S.candidates, lex > 0)
    pool = pv.top_mask(scan, pv.S.pool_candidates)
    parts = np.ones(len(scan), dtype=bool)
    parts[[rows[0] for rows in data.s.text_rows]] = False
    pool[parts] = pv.top_mask(scan[parts], p.get("part_pool", pv.S.pool_candidates))
    pool |= lex_hits
    weights = {**pv.WEIGHTS, **p.get("weights", {})}
    hits = {f: pv.top_mask(scores[f], pv.S.candidates, pool) for f in pv.FIELDS}
    union = lex_hits | hits["name"] | hits["description"] | hits["params"]
    total = np.zeros(pool.shape)
    for f in pv.FIELDS:
        total += weights[f] * normalised(scores[f], hits[f], union, p, f, parts)
    total += weights["lexical"] * normalised(lex, lex_hits, union, p, "lexical", parts)
    if p.get("lexf"):
        for w, f in zip(p["lexf"], ("name", "description", "params"), strict=True):
            if w:
                s = data.lexf[f]
                h = (s > 0) & union
                total += w * pv.zscore(s, h, union)
    if p.get("cover"):
        w, power = p["cover"]
        s = data.coverage ** power
        total += w * pv.zscore(s, union & (s > 0), union)
    if p.get("sif"):
        w, a, field = p["sif"]
        s = data.sif[(a, field)]
        h = pv.top_mask(s, pv.S.candidates, union)
        total += w * pv.zscore(s, h, union)
    return pv.verb_bonuses(np.where(union, total, -np.inf), data)


_MEMO: dict = {}


def whole_mixed(data: pv.Data, per: np.ndarray, lam: float) -> np.ndarray:
    """(1 - lam) the max-merge + lam the whole request's own score (its lowest where it did not rank the tool):
    a part's tool must also fit the whole request a little."""
    merged = pv.query_scores(data, per.copy())
    for i, rows in enumerate(data.s.text_rows):
        if len(rows) > 1:
            whole = per[rows[0]]
            low = whole[np.isfinite(whole)].min()
            merged[i] = (1 - lam) * merged[i] + lam * np.where(np.isfinite(whole), whole, low)
    return merged


def run(data: pv.Data, p: dict) -> dict[str, float]:
    key = (data.s.name, repr(sorted(p.items())))
    if key not in _MEMO:
        per = per_text(data, p)
        scores = whole_mixed(data, per, p["whole_mix"]) if p.get("whole_mix") else pv.query_scores(data, per)
        _MEMO[key] = metrics(data.s, scores)
    return _MEMO[key]


# --- extra per-set data -------------------------------------------------------------------------------------------


def add_banks(data: pv.Data, other: pv.Data, cache: EmbeddingCache) -> None:
    docs = [build_document(t) for t in data.s.tools]
    data.banks = {
        "self_description": data.d["description"],
        "self_name": data.d["name"],
        "self_params": data.d["params"],
        "desc": data.d["description"],
        "params": data.d["params"],
        "names": data.d["name"],
        "other": other.q[[r[0] for r in other.s.text_rows]],
    }
    del docs


def add_lexical_fields(data: pv.Data) -> None:
    docs = [build_document(t) for t in data.s.tools]
    enc = Bm25Encoder()
    data.lexf = {f: lexical_signal(data.s, [enc.encode_document(getattr(d, f)) for d in docs])
                 for f in ("name", "description", "params")}


def add_coverage(data: pv.Data) -> None:
    """Per text and tool: the IDF-weighted share of the text's distinct terms that the tool's lexical document has."""
    from bench.offline import _sparse_matrix

    docs = [build_document(t) for t in data.s.tools]
    enc = Bm25Encoder()
    columns: dict[int, int] = {}
    d = _sparse_matrix([enc.encode_document(doc.lexical) for doc in docs], columns)
    q = _sparse_matrix([enc.encode_query(t) for t in data.s.texts], columns)
    d = (d > 0).astype(np.float64).tocsr()
    q = (q > 0).astype(np.float64).tocsr()
    df = np.asarray(d.sum(axis=0)).ravel()
    idf = np.log(1 + (d.shape[0] - df + 0.5) / (df + 0.5))
    qi = q.multiply(idf).tocsr()
    matched = np.asarray((qi @ d.T).todense())
    data.coverage = matched / np.maximum(np.asarray(qi.sum(axis=1)), 1e-9)


def token_vectors(texts: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Raw token vectors (without [CLS]/[SEP]) and token ids of each text, cached."""
    cache = pickle.loads(TOKEN_CACHE.read_bytes()) if TOKEN_CACHE.is_file() else {}
    missing = [t for t in dict.fromkeys(texts) if t not in cache]
    if missing:
        from sentence_transformers import SentenceTransformer

        from indexer.onnx_export import model_dir

        model = SentenceTransformer(str(model_dir("bundled")), device="cpu")
        tok = model.tokenizer
        for start in range(0, len(missing), 512):
            chunk = missing[start : start + 512]
            out = model.encode(chunk, output_value="token_embeddings", batch_size=64)
            for text, tokens in zip(chunk, out, strict=True):
                ids = tok(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
                v = tokens.numpy()
                n = min(len(ids), len(v))
                cache[text] = (v[1 : n - 1].astype(np.float16), np.array(ids[1 : n - 1], dtype=np.int32))
            print(f"tokens {start + len(chunk)}/{len(missing)}", flush=True)
        TOKEN_CACHE.write_bytes(pickle.dumps(cache))
    return {t: cache[t] for t in texts}


def sif_vectors(items, freq: dict[int, float], a: float) -> np.ndarray:
    out = np.zeros((len(items), 384), dtype=np.float64)
    for i, (v, ids) in enumerate(items):
        if len(ids) == 0:
            continue
        w = np.array([a / (a + freq.get(int(t), 0.0)) for t in ids])
        out[i] = (w[:, None] * v.astype(np.float64)).sum(axis=0) / len(ids)
    return out


def add_sif(data: pv.Data, params: list[tuple[float, str]]) -> None:
    docs = [build_document(t) for t in data.s.tools]
    doc_texts = {"description": [d.description for d in docs],
                 "namedesc": [f"{d.name}: {d.description}" for d in docs]}
    data.sif = {}
    for a, field in params:
        tv = token_vectors(doc_texts[field] + data.s.texts)
        d_items = [tv[t] for t in doc_texts[field]]
        counts = Counter(int(t) for _, ids in d_items for t in ids)
        total = sum(counts.values())
        freq = {k: c / total for k, c in counts.items()}
        d = sif_vectors(d_items, freq, a)
        q = sif_vectors([tv[t] for t in data.s.texts], freq, a)
        u = np.linalg.svd(d, full_matrices=False)[2][0]
        d = pv.unit(d - np.outer(d @ u, u))
        q = pv.unit(q - np.outer(q @ u, u))
        data.sif[(a, field)] = q @ d.T


GROUPS: dict[str, list[dict]] = {
    "baseline": [{}],
    "mix": [{"norm": ("mix", a, k)} for a in (0.25, 0.5, 1.0) for k in (5, 60)],
    "soft": [{"norm": ("soft", t, c)} for t in (1.0, 2.0) for c in (0.5, 1.0, 2.0)],
    "soft2": [{"norm": ("soft", t, c)} for t in (1.5, 2.0, 3.0, 4.0) for c in (0.75, 1.0, 1.5)],
    "exp": [{"norm": ("exp", t)} for t in (1.5, 2.0, 3.0, 4.0, 6.0, 10.0)],
    "exp_some": [{"norm": ("exp", t, sig)} for t in (3.0, 4.0)
                 for sig in (("lexical",), pv.FIELDS, ("description",), ("description", "lexical"))],
    "exp_more": [{"norm": ("exp", t)} for t in (8.0, 12.0, 15.0, 20.0)],
    "exp_pair": [{"norm": ("exp2", td, tl)} for td in (6.0, 10.0, 20.0) for tl in (3.0, 4.0, 6.0)],
    "cover": [{"cover": (w, pw)} for w in (0.05, 0.1, 0.2) for pw in (1.0, 2.0)],
    "exp_rows": [{"norm": n, "rows": r} for r in ("parts", "whole")
                 for n in (("exp", 4.0, ("lexical",)), ("exp", 8.0), ("exp2", 10.0, 4.0))],
    "robust": [{"norm": ("robust", c)} for c in (0.5, 0.75, 1.0)],
    "local": [{"local": b} for b in (0.25, 0.5, 1.0)],
    "whole_mix": [{"whole_mix": lam} for lam in (0.1, 0.2, 0.3)],
    "qb": [{"qb": (b, beta, t, fields)} for b in ("other", "self_description", "names", "params")
           for fields in (("description",), ("name", "description", "params"))
           for beta, t in ((0.25, 0.05), (0.5, 0.05), (0.5, 1.0))],
    "lexf": [{"lexf": w} for w in ((0.1, 0, 0), (0.2, 0, 0), (0, 0.1, 0), (0, 0, 0.1), (0.1, 0.1, 0), (0.1, 0.1, 0.1),
                                   (0, 0, -0.1))],
    "sif": [{"sif": (w, a, "description")} for a in (1e-3, 1e-2) for w in (0.1, 0.2, 0.3)],
}


def main() -> None:
    global TOKEN_CACHE
    cache = EmbeddingCache(Path(sys.argv[1]))
    TOKEN_CACHE = Path(sys.argv[1]).with_suffix(".tokens.pkl")
    chosen = sys.argv[2:] or list(GROUPS)
    sets = [pv.prepare(cache, load_set("metatool", 3000, 1)), pv.prepare(cache, load_set("sealtools", None, 0))]
    for a, b in ((sets[0], sets[1]), (sets[1], sets[0])):
        add_banks(a, b, cache)
    only = os.environ.get("IDEAS12_SETS")  # e.g. "metatool": measure that set only
    if only:
        sets = [s for s in sets if s.s.name in only.split(",")]
    if "lexf" in chosen:
        for s in sets:
            add_lexical_fields(s)
    if "cover" in chosen:
        for s in sets:
            add_coverage(s)
    if "sif" in chosen:
        sif_params = sorted({p["sif"][1:] for p in GROUPS["sif"]})
        for s in sets:
            t = time.perf_counter()
            add_sif(s, sif_params)
            print(f"{s.s.name}: sif in {time.perf_counter() - t:.0f} s", flush=True)
    print("config | set | R@1 R@5 R@10 NDCG@10 MRR", flush=True)
    base = {d.s.name: run(d, dict(BASE)) for d in sets}
    for name, m in base.items():
        print(f"BASE | {name} | {pv.fmt(m)}", flush=True)
    for g in chosen:
        results: dict[str, list] = {}
        for data in sets:
            results[data.s.name] = []
            for p in GROUPS[g]:
                t = time.perf_counter()
                m = run(data, {**BASE, **p})
                results[data.s.name].append((p, m))
                print(f"{g} {p} | {data.s.name} | {pv.fmt(m)} ({time.perf_counter() - t:.0f}s)", flush=True)
        if len(GROUPS[g]) > 1 and len(results) == 2:
            for tuned, other in (("metatool", "sealtools"), ("sealtools", "metatool")):
                rows = results[tuned]
                best = max(range(len(rows)), key=lambda i: (rows[i][1]["recall@5"], rows[i][1]["ndcg@10"]))
                print(f"CROSS {g}: tuned on {tuned} {rows[best][0]} -> in-sample {pv.fmt(rows[best][1])}; "
                      f"{other} {pv.fmt(results[other][best][1])}", flush=True)


if __name__ == "__main__":
    main()
