"""The service's search as it runs today, offline on cached embeddings, and variants of its dense field scores.

Today: per text, the `tool` vector scan (unit sum of the three unit field vectors) for `pool_candidates` tools and
the lexical top `candidates` (score > 0); each dense field's exact cosine over that pool, its best `candidates`
z-scored (population std), the rest of the pool at the lowest of those z; lexical z-scored over its hits, the rest
at its floor; weighted sum; lead verb (+1.2 to the best 3 whose name verb is the text's lead verb), question read
(+.2 to the then best 3 read tools when the text is a question); max-merge with parts (part penalty); name verb
(+.2 when the whole query names the tool's verb); exact names first. No server signal (neither dev set describes
its servers), no usage signal.

Variants (each a change of the field score matrices and/or of the scan):
  centre A [scan]   field scores against normalize(d - A * mean_f) (mean_f: the catalog's mean field vector);
                    with `scan`, the `tool` vector is the unit sum of those centred field vectors. Without it the
                    pool still comes from today's scan: the service can compute these scores from the stored
                    vectors as (q.d - A q.m) / sqrt(1 - 2 A d.m + A^2 |m|^2), with d.m and |m| kept per tool.
  chunks B MODE     description score (1 - B) * cos(q, whole) + B * max(cos(q, whole), max over its sentences)
  toolsig W         the scan's own cosine as a fifth signal (weight W; the other weights unchanged)
  part_pool N       a split request's parts scan N tools (the whole text `pool_candidates`)

Usage: python bench/pool_variants.py EMBEDDINGS.pkl [GROUP ...] (groups: see GROUPS; default all)"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.embed_cache import EmbeddingCache
from bench.offline import EvalSet, lexical_signal, load_set, metrics
from indexer.documents import build_document
from indexer.lexical import Bm25Encoder
from indexer.names import READ_VERBS, asks, lead_verb, name_verb, query_stems
from service.settings import SearchSettings

FIELDS = ("name", "description", "params")
S = SearchSettings()
WEIGHTS = {"name": S.weight_name, "description": S.weight_description, "params": S.weight_params,
           "lexical": S.weight_lexical}
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|\s*\n+\s*")
MIN_CHUNK_WORDS = 4


def unit(m: np.ndarray) -> np.ndarray:
    return m / np.maximum(np.linalg.norm(m, axis=-1, keepdims=True), 1e-12)


def chunks(text: str, mode: str) -> list[str]:
    """The description's sentences (a sentence under MIN_CHUNK_WORDS words joins the next one).
    mode `sent`: sentences; `pair`: windows of two consecutive sentences; `head`: the first sentence and the rest."""
    parts = [p.strip() for p in _SENTENCE.split(text) if p and p.strip()]
    merged: list[str] = []
    carry = ""
    for p in parts:
        p = f"{carry} {p}".strip()
        if len(p.split()) < MIN_CHUNK_WORDS:
            carry = p
            continue
        merged.append(p)
        carry = ""
    if carry:
        if merged:
            merged[-1] = f"{merged[-1]} {carry}"
        else:
            merged.append(carry)
    if mode == "pair" and len(merged) > 2:
        merged = [f"{a} {b}" for a, b in zip(merged, merged[1:], strict=False)]
    if mode == "head" and len(merged) > 2:
        merged = [merged[0], " ".join(merged[1:])]
    return [c for c in merged if c != text]


@dataclass
class Data:
    s: EvalSet
    q: np.ndarray  # texts x dim
    d: dict[str, np.ndarray]  # field -> tools x dim
    lexical: np.ndarray  # texts x tools
    lead: np.ndarray  # texts x tools: 1 where the tool's name verb is the text's lead verb
    read: np.ndarray  # tools: 1 where the name verb reads
    asks: np.ndarray  # texts: question or not
    name_verb: np.ndarray  # queries x tools: the whole query names the tool's verb
    chunk_vectors: dict[str, list[np.ndarray]]  # mode -> per tool (chunks x dim)
    q_other_mean: np.ndarray | None = None  # the other dev set's mean query vector


def prepare(cache: EmbeddingCache, s: EvalSet, modes: tuple[str, ...] = ()) -> Data:
    docs = [build_document(t) for t in s.tools]
    encoder = Bm25Encoder()
    verbs = np.array([name_verb(t.name, t.server) for t in s.tools])
    lead = np.zeros((len(s.texts), len(s.tools)), dtype=bool)
    ask = np.zeros(len(s.texts), dtype=bool)
    for i, t in enumerate(s.texts):
        v = lead_verb(t)
        if v:
            lead[i] = verbs == v
        ask[i] = asks(t)
    named = np.zeros((len(s.queries), len(s.tools)), dtype=bool)
    for i, q in enumerate(s.queries):
        words = query_stems(q.text)
        named[i] = np.array([bool(v) and v in words for v in verbs])
    chunk_vectors: dict[str, list[np.ndarray]] = {}
    for mode in modes:
        if mode == "field":  # the catalog's own description fields, each a chunk (MetaTool: short, for-model)
            per_tool = [[str(r[k]).strip() for k in r if "description" in k.lower() and isinstance(r[k], str)
                         and str(r[k]).strip() and str(r[k]).strip() != d.description] if len(
                [k for k in r if "description" in k.lower() and isinstance(r[k], str) and r[k].strip()]) > 1 else []
                        for d, r in zip(docs, s.raw, strict=True)]
        else:
            per_tool = [chunks(d.description, mode) for d in docs]
        flat = [c for cs in per_tool for c in cs]
        vecs = cache.embed(flat) if flat else np.zeros((0, 384), dtype=np.float32)
        out, at = [], 0
        for cs in per_tool:
            out.append(vecs[at : at + len(cs)])
            at += len(cs)
        chunk_vectors[mode] = out
    return Data(
        s=s,
        q=cache.embed(s.texts).astype(np.float32),
        d={f: cache.embed([getattr(doc, f) for doc in docs]).astype(np.float32) for f in FIELDS},
        lexical=lexical_signal(s, [encoder.encode_document(doc.lexical) for doc in docs]),
        lead=lead,
        read=np.array([v in READ_VERBS for v in verbs]),
        asks=ask,
        name_verb=named,
        chunk_vectors=chunk_vectors,
    )


def top_mask(scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    s = scores if allowed is None else np.where(allowed, scores, -np.inf)
    k = min(k, s.shape[1])
    idx = np.argpartition(-s, k - 1, axis=1)[:, :k]
    mask = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(mask, idx, True, axis=1)
    if allowed is not None:
        mask &= allowed
    return mask


def zscore(scores: np.ndarray, hits: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """z over each row's hits (population std), the rest of the pool at the row's lowest hit z; 0 for a row
    without hits (as ranking.fuse); outside the pool 0 (masked later)."""
    s = scores.astype(np.float64)
    n = hits.sum(axis=1, keepdims=True)
    h = np.where(hits, s, 0.0)
    mean = h.sum(axis=1, keepdims=True) / np.maximum(n, 1)
    var = np.where(hits, (s - mean) ** 2, 0.0).sum(axis=1, keepdims=True) / np.maximum(n, 1)
    std = np.sqrt(var)
    ok = (std >= 1e-9) & (n > 0)
    z = np.where(ok, (s - mean) / np.where(ok, std, 1.0), 0.0)
    floor = np.where(hits, z, np.inf).min(axis=1, keepdims=True)
    floor = np.where(np.isfinite(floor) & ok, floor, 0.0)
    z = np.where(hits, z, floor)
    return np.where(pool, z, 0.0)


def field_scores(data: Data, p: dict) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-field score matrices (texts x tools) and the scan's cosine, for configuration p."""
    alpha = p.get("centre", 0.0)
    fields = p.get("centre_fields", FIELDS)
    docs = {}
    for f in FIELDS:
        d = data.d[f]
        docs[f] = unit(d - alpha * d.mean(axis=0)) if alpha and f in fields else d
        if p.get("abtt") and f in fields:
            # all-but-the-top: also drop the centred vectors' top principal directions (Mu & Viswanath 2018)
            x = d - d.mean(axis=0)
            _, vecs = np.linalg.eigh(x.T @ x)
            top = vecs[:, -p["abtt"]:]
            docs[f] = unit(x - (x @ top) @ top.T)
    q = data.q
    if p.get("qcentre"):
        m = data.q_other_mean if p.get("qmean") == "other" else data.q[[r[0] for r in data.s.text_rows]].mean(axis=0)
        q = unit(q - p["qcentre"] * m)
    scores = {f: q @ docs[f].T for f in FIELDS}
    scan_docs = docs if p.get("scan") else data.d
    tool = unit(scan_docs["name"] + scan_docs["description"] + scan_docs["params"])
    scan = data.q @ tool.T
    if p.get("chunks"):
        b, mode = p["chunks"]
        whole = scores["description"]
        best = whole.copy()
        for j, cv in enumerate(data.chunk_vectors[mode]):
            if len(cv):
                cvv = unit(cv - alpha * data.d["description"].mean(axis=0)) if alpha and "description" in fields else cv
                best[:, j] = np.maximum(best[:, j], (data.q @ cvv.T).max(axis=1))
        scores["description"] = (1 - b) * whole + b * best
    return scores, scan


def per_text_scores(data: Data, p: dict) -> np.ndarray:
    scores, scan = field_scores(data, p)
    lex = data.lexical
    lex_hits = top_mask(lex, S.candidates, lex > 0)
    pool = top_mask(scan, p.get("pool", S.pool_candidates))
    if p.get("part_pool"):  # the parts' scans keep fewer tools than the whole text's
        parts = np.ones(len(scan), dtype=bool)
        parts[[rows[0] for rows in data.s.text_rows]] = False
        pool[parts] = top_mask(scan[parts], p["part_pool"])
    pool |= lex_hits
    weights = {**WEIGHTS, **p.get("weights", {})}
    hits = {f: top_mask(scores[f], S.candidates, pool) for f in FIELDS}
    # the fused candidates: the union of every signal's hits (a pooled tool in no field's best 50 is dropped)
    union = lex_hits | hits["name"] | hits["description"] | hits["params"]
    total = np.zeros(pool.shape)
    for f in FIELDS:
        if weights[f]:
            total += weights[f] * zscore(scores[f], hits[f], union)
    total += weights["lexical"] * zscore(lex, lex_hits, union)
    if p.get("toolsig"):
        total += p["toolsig"] * zscore(scan, top_mask(scan, S.candidates, pool), union)
    return verb_bonuses(np.where(union, total, -np.inf), data)


def verb_bonuses(total: np.ndarray, data: Data) -> np.ndarray:
    """The lead verb, then the question's read verbs, each added among the then best 3 of each text."""
    rows = np.arange(total.shape[0])[:, None]
    head = np.argpartition(-total, 2, axis=1)[:, :3]
    total[rows, head] += S.weight_lead_verb * data.lead[rows, head]
    head = np.argpartition(-total, 2, axis=1)[:, :3]
    total[rows, head] += S.weight_question_read * (data.read[head] & data.asks[:, None])
    return total


def query_scores(data: Data, per_text: np.ndarray, penalty: float = S.part_penalty) -> np.ndarray:
    s = data.s
    out = np.empty((len(s.queries), per_text.shape[1]))
    for i, rows in enumerate(s.text_rows):
        out[i] = per_text[rows[0]]
        if len(rows) > 1:
            out[i] = np.maximum(out[i], per_text[rows[1:]].max(axis=0) - penalty)
    out += S.weight_name_verb * data.name_verb
    for i, ex in enumerate(s.exact):
        if ex:
            out[i, ex] += 1e6
    return out


def run(data: Data, p: dict) -> dict[str, float]:
    if p.get("chunks") and not any(len(c) for c in data.chunk_vectors[p["chunks"][1]]):
        p = {k: v for k, v in p.items() if k != "chunks"}  # no tool has chunks: the same scores as without
    key = (data.s.name, repr(sorted(p.items())))
    if key not in _MEMO:
        _MEMO[key] = metrics(data.s, query_scores(data, per_text_scores(data, p)))
    return _MEMO[key]


_MEMO: dict[tuple[str, str], dict[str, float]] = {}


GROUPS: dict[str, list[dict]] = {
    "baseline": [{}],
    "centre": [{"centre": a} for a in (0.5, 0.75, 1.0)],
    "centre_scan": [{"centre": a, "scan": True} for a in (0.5, 0.75, 1.0)],
    "centre_desc": [{"centre": a, "centre_fields": ("description",)} for a in (0.5, 1.0)],
    "chunks": [{"chunks": (b, m)} for m in ("sent", "head", "pair", "field") for b in (0.25, 0.5, 0.75, 1.0)],
    "centre_more": [{"centre": a} for a in (1.25, 1.5)],
    "abtt": [{"centre": 1.0, "abtt": n} for n in (1, 2, 4, 8)],
    "toolsig": [{"toolsig": w} for w in (0.1, 0.2, 0.3)],
    "part_pool": [{"centre": 1.0, "part_pool": n} for n in (25, 50, 75)],
    "qcentre": [{"qcentre": a} for a in (0.25, 0.5, 1.0)] + [{"qcentre": a, "qmean": "other"} for a in (0.25, 0.5)],
}


def fmt(m: dict[str, float]) -> str:
    return " ".join(f"{m[k]:.4f}" for k in ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr"))


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    chosen = sys.argv[2:] or list(GROUPS)
    modes = tuple(sorted({p["chunks"][1] for g in chosen for p in GROUPS[g] if "chunks" in p}))
    sets = [prepare(cache, load_set("metatool", 3000, 1), modes), prepare(cache, load_set("sealtools", None, 0), modes)]
    for a, b in ((sets[0], sets[1]), (sets[1], sets[0])):
        a.q_other_mean = b.q[[r[0] for r in b.s.text_rows]].mean(axis=0)
    print("config | set | R@1 R@5 R@10 NDCG@10 MRR", flush=True)
    results: dict[str, dict[str, list[tuple[dict, dict]]]] = {}
    for g in chosen:
        results[g] = {}
        for data in sets:
            results[g][data.s.name] = []
            for p in GROUPS[g]:
                t = time.perf_counter()
                m = run(data, p)
                results[g][data.s.name].append((p, m))
                print(f"{g} {p} | {data.s.name} | {fmt(m)} ({time.perf_counter() - t:.0f}s)", flush=True)
        if len(GROUPS[g]) > 1:
            for tuned, other in (("metatool", "sealtools"), ("sealtools", "metatool")):
                rows = results[g][tuned]
                best = max(range(len(rows)), key=lambda i: (rows[i][1]["recall@5"], rows[i][1]["ndcg@10"]))
                print(f"CROSS {g}: tuned on {tuned} {rows[best][0]} -> {other} {fmt(results[g][other][best][1])}",
                      flush=True)


if __name__ == "__main__":
    main()
