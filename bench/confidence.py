"""Per-query confidence of a dense signal, offline: each dense field's weighted z-scores of a text scaled by
f = min(1, (top cosine of that field among the text's hits / c0) ** p).

`cos`: `raw` (the uncentred cosine q.d) or `centred` (the score the service fuses with centre 1: q.(d - m) / |d - m|).
`fields`: all three dense fields or `description` only. Every setting runs on top of centring alpha 1 (the service).

Alternatives (one of them, if the confidence scale fails):
  floor R    the z-score's std of a dense field is at least R * top cosine (noise cannot make a 3-sigma outlier)

Usage: python -m bench.confidence EMBEDDINGS.pkl [dev|demo|all]"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench import pool_variants as pv
from bench.embed_cache import EmbeddingCache
from bench.offline import EvalSet, lexical_signal, load_set, metrics
from indexer.documents import build_document
from indexer.intents import split_intents
from indexer.lexical import Bm25Encoder
from indexer.names import READ_VERBS, asks, lead_verb, name_verb, query_stems
from indexer.servers import server_document, server_info

S = pv.S
FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/retrieval/real_catalog_queries.jsonl"


def zscore_floor(scores: np.ndarray, hits: np.ndarray, pool: np.ndarray, std_floor: np.ndarray) -> np.ndarray:
    """pv.zscore with the std at least `std_floor` (per row)."""
    s = scores.astype(np.float64)
    n = hits.sum(axis=1, keepdims=True)
    mean = np.where(hits, s, 0.0).sum(axis=1, keepdims=True) / np.maximum(n, 1)
    var = np.where(hits, (s - mean) ** 2, 0.0).sum(axis=1, keepdims=True) / np.maximum(n, 1)
    std = np.maximum(np.sqrt(var), std_floor)
    ok = (std >= 1e-9) & (n > 0)
    z = np.where(ok, (s - mean) / np.where(ok, std, 1.0), 0.0)
    floor = np.where(hits, z, np.inf).min(axis=1, keepdims=True)
    floor = np.where(np.isfinite(floor) & ok, floor, 0.0)
    return np.where(pool, np.where(hits, z, floor), 0.0)


def dense_columns(scores, raw, hits, union, p, weights):
    """Weighted dense z columns of each field (texts x tools) and the per-text factor f of each field."""
    conf = p.get("conf")  # (c0, power, cos, fields)
    floor = p.get("floor")  # (R, cos, fields)
    cols, factors = {}, {}
    for f in pv.FIELDS:
        if not weights[f]:
            continue
        ref = None
        spec = conf or floor
        if spec and f in spec[-1]:
            base = raw[f] if spec[-2] == "raw" else scores[f]
            ref = np.where(hits[f], base, -np.inf).max(axis=1)
            ref = np.where(np.isfinite(ref), ref, 0.0)
        if floor and ref is not None:
            z = zscore_floor(scores[f], hits[f], union, (floor[0] * np.maximum(ref, 0.0))[:, None])
            factors[f] = np.ones(len(ref))
        else:
            z = pv.zscore(scores[f], hits[f], union)
            if conf and ref is not None:
                factors[f] = np.minimum(1.0, np.maximum(ref, 0.0) / conf[0]) ** conf[1]
            else:
                factors[f] = np.ones(z.shape[0])
        cols[f] = weights[f] * z * factors[f][:, None]
    return cols, factors


def per_text(data: pv.Data, p: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    base = {"centre": 1.0}
    scores, scan = pv.field_scores(data, base)
    raw = {f: data.q @ data.d[f].T for f in pv.FIELDS}
    lex = data.lexical
    lex_hits = pv.top_mask(lex, S.candidates, lex > 0)
    pool = pv.top_mask(scan, S.pool_candidates) | lex_hits
    hits = {f: pv.top_mask(scores[f], S.candidates, pool) for f in pv.FIELDS}
    union = lex_hits | hits["name"] | hits["description"] | hits["params"]
    cols, factors = dense_columns(scores, raw, hits, union, p, pv.WEIGHTS)
    total = sum(cols.values()) + pv.WEIGHTS["lexical"] * pv.zscore(lex, lex_hits, union)
    return pv.verb_bonuses(np.where(union, total, -np.inf), data), factors


def low_queries(data: pv.Data, factors: dict[str, np.ndarray]) -> int:
    """Queries whose whole text has f < 1 in some field."""
    whole = [r[0] for r in data.s.text_rows]
    low = np.zeros(len(whole), dtype=bool)
    for v in factors.values():
        low |= v[whole] < 1 - 1e-12
    return int(low.sum())


def settings() -> list[dict]:
    out = [{}]
    for cos, fields in itertools.product(("raw", "centred"), (pv.FIELDS, ("description",))):
        c0s = (0.2, 0.25, 0.3, 0.35, 0.4) if cos == "raw" else (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
        for c0, power in itertools.product(c0s, (1, 2)):
            out.append({"conf": (c0, power, cos, fields)})
    return out


def label(p: dict) -> str:
    if not p:
        return "centre1 baseline"
    if "conf" in p:
        c0, power, cos, fields = p["conf"]
        return f"conf c0={c0} p={power} {cos} {'all' if len(fields) == 3 else 'desc'}"
    r, cos, fields = p["floor"]
    return f"floor R={r} {cos} {'all' if len(fields) == 3 else 'desc'}"


# ---- the bundled real catalogs (bench/demo_explain.py's pipeline, centre 1, server signal) ----


def demo_ranks(cache: EmbeddingCache, configs: list[dict]) -> dict[str, dict[str, tuple[int, float]]]:
    from bench.offline import demo_tools

    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    tools, raw_info = demo_tools()
    qn = [t.qualified_name for t in tools]
    docs = [build_document(t) for t in tools]
    d = {f: cache.embed([getattr(x, f) for x in docs]).astype(np.float64) for f in pv.FIELDS}
    dc = {f: pv.unit(d[f] - d[f].mean(axis=0)) for f in pv.FIELDS}
    servers = sorted({t.server for t in tools})
    info = {t.server: server_info(r.get("server_info")) for t, r in zip(tools, raw_info, strict=True)}
    sdocs = cache.embed([server_document(sv, info[sv]) for sv in servers])
    col = np.array([servers.index(t.server) for t in tools])
    described = np.array([bool(set(info[t.server]) - {"name"}) for t in tools])
    verbs = np.array([name_verb(t.name, t.server) for t in tools])
    enc = Bm25Encoder()
    out: dict[str, dict[str, tuple[int, float]]] = {label(p): {} for p in configs}
    for row in rows:
        query = row["query"]
        texts = [query, *split_intents(query)]
        s = EvalSet("demo", tools, qn, raw_info, [], texts, [], [], [])
        q = cache.embed(texts).astype(np.float64)
        lex = lexical_signal(s, [enc.encode_document(x.lexical) for x in docs])
        server_cos = (q @ sdocs.T)[:, col]
        scores = {f: q @ dc[f].T for f in pv.FIELDS}
        raw = {f: q @ d[f].T for f in pv.FIELDS}
        scan = q @ pv.unit(d["name"] + d["description"] + d["params"]).T
        lex_hits = pv.top_mask(lex, S.candidates, lex > 0)
        pool = pv.top_mask(scan, S.pool_candidates) | lex_hits
        hits = {f: pv.top_mask(scores[f], S.candidates, pool) for f in pv.FIELDS}
        union = lex_hits | hits["name"] | hits["description"] | hits["params"]
        cover = union & described[None]
        srv = S.weight_server * pv.zscore(server_cos, cover, cover)
        lead = np.array([[bool(lead_verb(t)) and v == lead_verb(t) for v in verbs] for t in texts])
        ask = np.array([asks(t) for t in texts])
        named = np.array([bool(v) and v in query_stems(query) for v in verbs])
        read = np.array([v in READ_VERBS for v in verbs])
        for p in configs:
            cols, factors = dense_columns(scores, raw, hits, union, p, pv.WEIGHTS)
            total = sum(cols.values()) + pv.WEIGHTS["lexical"] * pv.zscore(lex, lex_hits, union) + srv
            total = np.where(union, total, -np.inf)
            r_ = np.arange(total.shape[0])[:, None]
            head = np.argsort(-total, axis=1)[:, :3]
            total[r_, head] += S.weight_lead_verb * lead[r_, head]
            head = np.argsort(-total, axis=1)[:, :3]
            total[r_, head] += S.weight_question_read * (read[head] & ask[:, None])
            final = total[0].copy()
            if len(texts) > 1:
                final = np.maximum(final, total[1:].max(axis=0) - S.part_penalty)
            final = final + S.weight_name_verb * named
            order = [j for j in np.argsort(-final, kind="stable") if np.isfinite(final[j])]
            ranks = [order.index(qn.index(n)) + 1 if qn.index(n) in order else 999 for n in row["relevant"]]
            out[label(p)][row["qid"]] = (min(ranks), float(factors.get("description", np.ones(1))[0]), row["top"])
    return out


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    what = sys.argv[2] if len(sys.argv) > 2 else "all"
    configs = settings()
    if len(sys.argv) > 3 and sys.argv[3] == "floor":
        configs = [{}] + [{"floor": (r, cos, fl)} for cos in ("raw", "centred") for fl in (pv.FIELDS, ("description",))
                          for r in (0.05, 0.1, 0.15, 0.2, 0.3)]
    if what in ("demo", "all"):
        ranks = demo_ranks(cache, configs)
        base = ranks[label({})]
        print("DEMO config | issue-1 rank | misses (rank > top) | changed ranks (qid base->new)", flush=True)
        for name, r in ranks.items():
            miss = sum(v[0] > v[2] for v in r.values())
            changed = " ".join(f"{k}:{base[k][0]}->{v[0]}" for k, v in r.items() if v[0] != base[k][0])
            print(f"DEMO {name} | {r['issue-1'][0]} (f_desc {r['issue-1'][1]:.2f}) | {miss} | {changed}", flush=True)
    if what in ("dev", "all"):
        sets = [pv.prepare(cache, load_set("metatool", 3000, 1)), pv.prepare(cache, load_set("sealtools", None, 0))]
        res: dict[str, list[tuple[dict, dict, int]]] = {}
        for data in sets:
            res[data.s.name] = []
            for p in configs:
                t = time.perf_counter()
                per, factors = per_text(data, p)
                m = metrics(data.s, pv.query_scores(data, per))
                n = low_queries(data, factors)
                res[data.s.name].append((p, m, n))
                print(f"DEV {label(p)} | {data.s.name} | {pv.fmt(m)} | f<1 {n}/{len(data.s.queries)}"
                      f" ({time.perf_counter() - t:.0f}s)", flush=True)
        for tuned, other in (("metatool", "sealtools"), ("sealtools", "metatool")):
            rows = res[tuned]
            best = max(range(1, len(rows)), key=lambda i: (rows[i][1]["recall@5"], rows[i][1]["ndcg@10"]))
            print(f"CROSS tuned on {tuned}: {label(rows[best][0])} ({pv.fmt(rows[best][1])}) -> {other}"
                  f" {pv.fmt(res[other][best][1])} (baseline {pv.fmt(res[other][0][1])})", flush=True)


if __name__ == "__main__":
    main()
