"""Generic ranking ideas measured on both dev sets, in-sample and cross-fit (issue 12, part 4).

Each idea has a small parameter grid; its parameter is tuned on one set and measured on the other, next to the
in-sample best. Fusion weights stay at the service's defaults so that only the idea moves.

Usage: python bench/ideas.py EMBEDDINGS.pkl [IDEA ...] (a bench/embed_cache.py cache; missing texts are embedded)"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.embed_cache import EmbeddingCache
from bench.offline import EvalSet, load_demo_set, load_set, metrics, zclip
from indexer.documents import build_document
from indexer.intents import MIN_PART_WORDS
from indexer.lexical import Bm25Encoder, tokenize
from indexer.names import without_framing
from service.settings import SearchSettings

DENSE = ("name", "description", "params")
def strip_boilerplate(text: str) -> str:
    """The request without its framing words, for the dense query; the text itself when nothing else is left."""
    stripped = without_framing(text)
    return stripped if len(stripped.split()) >= MIN_PART_WORDS else text


DEMO_MEANS: dict[str, np.ndarray] = {}  # mean document vector per field over the bundled real catalogs
DEFAULTS = SearchSettings()
WEIGHTS = {"name": DEFAULTS.weight_name, "description": DEFAULTS.weight_description,
           "params": DEFAULTS.weight_params, "lexical": DEFAULTS.weight_lexical}


@dataclass
class Vectors:
    """Cached embeddings of one set: query texts (as asked and without boilerplate) and each dense field."""

    queries: np.ndarray
    stripped: np.ndarray
    docs: dict[str, np.ndarray]
    doc_texts: dict[str, list[str]]
    lexical: np.ndarray  # texts x tools BM25
    long_docs: np.ndarray  # description field with the catalog's longer description field appended (MetaTool)
    long_lexical: np.ndarray
    other_means: dict[str, np.ndarray] | None  # the other dev set's mean document vector per field
    combined: np.ndarray | None  # one text per tool: "name words: description" (embedded when measured)
    verb: np.ndarray  # texts x tools, 1 where the request names the tool's leading verb


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-9)


def prepare(cache: EmbeddingCache, s: EvalSet, chosen: list[str]) -> Vectors:
    from bench.crossfit import verb_bonus
    from bench.offline import lexical_signal

    docs = [build_document(t) for t in s.tools]
    texts = {f: [getattr(d, f) for d in docs] for f in DENSE}
    encoder = Bm25Encoder()
    longer = [str(r.get("description_for_model") or "") for r in s.raw]
    long_texts = [f"{d.description} {x}".strip()[:4000] for d, x in zip(docs, longer, strict=True)]
    return Vectors(
        queries=cache.embed(s.texts),
        stripped=cache.embed([strip_boilerplate(t) for t in s.texts]) if "boilerplate" in chosen else np.zeros(0),
        docs={f: cache.embed(texts[f]) for f in DENSE},
        doc_texts=texts,
        lexical=lexical_signal(s, [encoder.encode_document(d.lexical) for d in docs]),
        verb=verb_bonus(s),
        long_docs=cache.embed(long_texts),
        other_means=None,
        combined=cache.embed([f"{d.name}: {d.description}" for d in docs]) if "combined" in chosen else None,
        long_lexical=lexical_signal(
            s, [encoder.encode_document(f"{d.lexical} {x}") for d, x in zip(docs, longer, strict=True)]
        ),
    )


def whitened(q: np.ndarray, d: np.ndarray, shrink: float, power: float) -> tuple[np.ndarray, np.ndarray]:
    """Queries and documents centred on the documents' mean and whitened by their shrunk covariance
    (C scaled to unit mean eigenvalue, mixed with the identity by `shrink`, raised to -power/2)."""
    mean = d.mean(axis=0)
    dc = d - mean
    cov = dc.T @ dc / len(d)
    cov = cov / (np.trace(cov) / cov.shape[0])
    cov = (1 - shrink) * cov + shrink * np.eye(cov.shape[0])
    values, vectors = np.linalg.eigh(cov)
    w = vectors @ np.diag(values ** (-power / 2)) @ vectors.T
    return _unit((q - mean) @ w), _unit(dc @ w)


def hubness(d: np.ndarray, k: int) -> np.ndarray:
    """Each document's mean cosine to its k nearest other documents (CSLS's r_T)."""
    sim = d @ d.T
    np.fill_diagonal(sim, -np.inf)
    k = min(k, sim.shape[0] - 1)
    return -np.partition(-sim, k - 1, axis=1)[:, :k].mean(axis=1)


def dense_scores(v: Vectors, field: str, p: dict) -> np.ndarray:
    q = v.stripped if p.get("strip") else v.queries
    d = v.long_docs if field == "description" and p.get("long") else v.docs[field]
    if p.get("centre") and field in p.get("fields", DENSE):
        means = DEMO_MEANS if p.get("mean") == "demo" else v.other_means if p.get("mean") == "other" else None
        m = (means[field] if means else d.mean(axis=0)) * p["centre"]
        q, d = (q if p.get("docs_only") else _unit(q - m)), _unit(d - m)
    if p.get("whiten") and field in p.get("fields", DENSE):
        q, d = whitened(q, d, p["whiten"], p.get("power", 1.0))
    out = q @ d.T
    if p.get("csls"):
        out = out - p["csls"] * hubness(d, p.get("csls_k", 10))[None, :]
    return out


def name_coverage(s: EvalSet) -> np.ndarray:
    """Per text: the share of its terms that occur in some tool name of the catalog."""
    vocab = {t for tool in s.tools for t in tokenize(tool.name)}
    out = np.zeros(len(s.texts))
    for i, text in enumerate(s.texts):
        terms = set(tokenize(text))
        out[i] = len(terms & vocab) / len(terms) if terms else 0.0
    return out


def run(s: EvalSet, v: Vectors, p: dict) -> dict[str, float]:
    """Metrics of one configuration `p` (see IDEAS for the keys)."""
    top = p.get("pool", 100)
    weights = dict(WEIGHTS)
    if p.get("param_share"):
        # Params weight scaled by the share of tools with parameters; the rest goes to the description.
        share = np.mean([bool(t.input_schema.get("properties")) for t in s.tools])
        moved = weights["params"] * (1 - share)
        weights["params"] -= moved
        weights["description"] += moved
    import bench.offline as off

    off.TOP = top
    total = np.zeros((len(s.texts), len(s.tools)))
    for f in DENSE:
        if weights[f]:
            total += weights[f] * zclip(dense_scores(v, f, p), std_floor=p.get("std_floor", {}).get(f, 0.0))
    if p.get("combined"):
        # A share of the description weight moves to one embedded "name: description" text.
        w = p["combined"] * weights["description"]
        assert v.combined is not None
        total += w * zclip(v.queries @ v.combined.T) - w * zclip(dense_scores(v, "description", p))
    lexical = v.long_lexical if p.get("long") == "both" else v.lexical
    lex = zclip(lexical, lexical > 0)
    lex_w = np.full(len(s.texts), weights["lexical"])
    if p.get("adaptive"):
        # Lexical weight from (1 - g) to (1 + g) times its default as the query's name coverage goes 0 -> 1.
        lex_w = lex_w * (1 + p["adaptive"] * (2 * name_coverage(s) - 1))
    total += lex_w[:, None] * lex + p.get("verb", DEFAULTS.weight_name_verb) * v.verb
    if p.get("prf"):
        total = feedback(v, total, weights, p)
    off.TOP = 100
    return metrics(s, merged_scores(s, total, p.get("part_penalty", 0.0), p.get("min_words", 0)))


def feedback(v: Vectors, total: np.ndarray, weights: dict[str, float], p: dict) -> np.ndarray:
    """Pseudo-relevance feedback (Rocchio): each text's dense query moved towards the mean vector of its `prf_m`
    best tools so far (per field, by `prf`), and the dense signals scored again with it."""
    m, beta = p.get("prf_m", 3), p["prf"]
    top = np.argsort(-total, axis=1)[:, :m]
    out = total.copy()
    for f in DENSE:
        if not weights[f] or f not in p.get("prf_fields", DENSE):
            continue
        docs = v.docs[f]
        moved = _unit(v.queries + beta * docs[top].mean(axis=1))
        out += weights[f] * (zclip(moved @ docs.T) - zclip(v.queries @ docs.T))
    return out


def merged_scores(s: EvalSet, per_text: np.ndarray, penalty: float, min_words: int) -> np.ndarray:
    """query_scores with each part's scores lowered by `penalty`, and no split under `min_words` words."""
    out = np.empty((len(s.queries), per_text.shape[1]))
    for i, rows in enumerate(s.text_rows):
        out[i] = per_text[rows[0]]
        if len(rows) > 1 and len(s.queries[i].text.split()) >= min_words:
            out[i] = np.maximum(out[i], per_text[rows[1:]].max(axis=0) - penalty)
        if s.exact[i]:
            out[i, s.exact[i]] += 1e6
    return out


IDEAS: dict[str, list[dict]] = {
    "baseline": [{}],
    "centre": [{"centre": c} for c in (0.5, 0.75, 1.0)],
    "centre_docs": [{"centre": c, "docs_only": True, "fields": f} for c in (0.5, 1.0)
                    for f in (DENSE, ("name", "description"), ("description",))],
    "centre_fixed_mean": [{"centre": 1.0, "docs_only": True, "mean": m} for m in ("other", "demo")],
    "combo": [{"centre": 1.0, "docs_only": True, "part_penalty": x} for x in (0.3, 0.5, 1.0)]
    + [{"centre": 1.0, "docs_only": True, "mean": "demo", "part_penalty": 0.5}]
    + [{"centre": 1.0, "docs_only": True, "part_penalty": 0.5, "long": "both"}],
    "whiten": [{"whiten": b} for b in (0.1, 0.25, 0.5, 0.75, 0.9)],
    "whiten_power": [{"whiten": b, "power": x} for b in (0.25, 0.5) for x in (0.5, 1.5)],
    "csls_one": [{"csls": 0.25, "csls_k": 10}],
    "csls": [{"csls": b, "csls_k": k} for b in (0.25, 0.5, 1.0) for k in (5, 10, 25)],
    "adaptive_lexical": [{"adaptive": g} for g in (0.25, 0.5, 0.75, 1.0)],
    "boilerplate": [{"strip": True}],
    "param_share": [{"param_share": True}],
    "long_description": [{"long": "dense"}, {"long": "both"}],
    "part_penalty": [{"part_penalty": x} for x in (0.1, 0.2, 0.3, 0.5, 1.0, 100.0)],
    "split_min_words": [{"min_words": n} for n in (15, 25, 40, 60)],
    "combined": [{"combined": x} for x in (0.25, 0.5, 1.0)],
    "pool": [{"pool": n} for n in (25, 50, 200)],
    "prf": [{"prf": b, "prf_m": m} for b in (0.25, 0.5, 1.0) for m in (1, 3, 5)],
    "prf_description": [{"prf": b, "prf_m": 3, "prf_fields": ("description",)} for b in (0.25, 0.5, 1.0)],
    "std_floor": [{"std_floor": dict.fromkeys(fields, x)} for x in (0.02, 0.03, 0.04, 0.05, 0.07, 0.1)
                  for fields in (DENSE, ("description",))],
}


def crossfit(name: str, sets: list[tuple[EvalSet, Vectors]], grid: list[dict]) -> None:
    rows: dict[str, list[tuple[dict, dict[str, float], float]]] = {}
    for s, v in sets:
        rows[s.name] = []
        for p in grid:
            started = time.perf_counter()
            m = run(s, v, p)
            rows[s.name].append((p, m, time.perf_counter() - started))
    for tuned, other in (("metatool", "sealtools"), ("sealtools", "metatool")):
        if tuned not in rows or other not in rows:
            continue
        best = max(range(len(grid)), key=lambda i: (rows[tuned][i][1]["recall@5"], rows[tuned][i][1]["ndcg@10"]))
        a, b = rows[tuned][best][1], rows[other][best][1]
        print(f"{name:17} tuned on {tuned:9} {grid[best]}: in-sample R@5 {a['recall@5']:.4f} "
              f"NDCG@10 {a['ndcg@10']:.4f} | cross-fit on {other} R@5 {b['recall@5']:.4f} "
              f"NDCG@10 {b['ndcg@10']:.4f}", flush=True)
    for s_name, r in rows.items():
        for p, m, _ in r:
            print(f"    {s_name:9} {p} R@1 {m['recall@1']:.4f} R@5 {m['recall@5']:.4f} NDCG@10 {m['ndcg@10']:.4f}")


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    chosen = sys.argv[2:] or list(IDEAS)
    sets = []
    only = os.environ.get("IDEAS_SETS", "metatool,sealtools").split(",")
    for name, n, seed in (("metatool", 3000, 1), ("sealtools", None, 0)):
        if name not in only:
            continue
        s = load_set(name, n, seed)
        sets.append((s, prepare(cache, s, chosen)))
    demo = [build_document(t) for t in load_demo_set().tools]
    DEMO_MEANS.update({f: cache.embed([getattr(d, f) for d in demo]).mean(axis=0) for f in DENSE})
    if len(sets) == 2:
        (_, a), (_, b) = sets
        a.other_means = {f: b.docs[f].mean(axis=0) for f in DENSE}
        b.other_means = {f: a.docs[f].mean(axis=0) for f in DENSE}
    for idea in chosen:
        crossfit(idea, sets, IDEAS[idea])


if __name__ == "__main__":
    main()

