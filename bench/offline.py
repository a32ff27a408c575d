"""Offline search quality on cached embeddings: every signal computed with numpy, fusion vectorised.

Mirrors the service's ranking (exact dense search, BM25 with Qdrant's IDF, per-query z-scores over each signal's
top 100, weighted sum, max-merge over multi-intent parts, exact names first) so variants can be compared in seconds.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import sparse

from bench.embed_cache import EmbeddingCache
from indexer.documents import build_document, normalize_name_key
from indexer.intents import split_intents
from indexer.lexical import Bm25Encoder, SparseVector
from indexer.tools import ToolDefinition, normalize_server_id
from service.catalog.files import load_catalog_file
from service.search.evaluation import load_queries
from service.settings import SearchSettings


def find_eval() -> Path:
    """The dev sets: `shared/eval` in the nearest parent of this file that has one (TOOLSCOUT_EVAL overrides)."""
    override = os.environ.get("TOOLSCOUT_EVAL")
    if override:
        return Path(override)
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "eval").is_dir():
            return parent / "shared" / "eval"
    raise FileNotFoundError("no shared/eval above " + str(Path(__file__).parent) + "; set TOOLSCOUT_EVAL")


EVAL = find_eval()
TOP = 100


@dataclass
class EvalSet:
    """A catalog and its queries with every text's row in the query matrices."""

    name: str
    tools: list[ToolDefinition]
    ids: list[str]
    raw: list[dict]
    queries: list  # service.search.evaluation.Query
    texts: list[str]  # whole queries then parts, deduplicated
    text_rows: list[list[int]]  # per query: row of the whole text, then rows of its parts
    relevant: list[np.ndarray]
    exact: list[list[int]]
    signals: dict[str, np.ndarray] = field(default_factory=dict)  # signal -> (texts x tools) scores
    candidate: dict[str, np.ndarray] = field(default_factory=dict)  # signal -> bool mask of hits (lexical: > 0)


def load_set(name: str, max_queries: int | None, seed: int) -> EvalSet:
    """Tools and queries of one dev set."""
    catalog = load_catalog_file(EVAL / name / "catalog.jsonl")
    tools = [ToolDefinition(**{**t, "server": normalize_server_id(t["server"])}) for t in catalog.tools]
    ids = [catalog.ids[t.qualified_name] for t in tools]
    raw = [__import__("json").loads(line) for line in (EVAL / name / "catalog.jsonl").read_text().splitlines()]
    queries = load_queries(EVAL / name / "queries.jsonl", max_queries, seed)
    position = {tool_id: i for i, tool_id in enumerate(ids)}
    texts: dict[str, int] = {}
    rows = []
    for q in queries:
        rows.append([texts.setdefault(t, len(texts)) for t in [q.text, *split_intents(q.text)]])
    keys: dict[str, list[int]] = {}
    for i, t in enumerate(tools):
        for key in {normalize_name_key(t.qualified_name), normalize_name_key(t.name)}:
            keys.setdefault(key, []).append(i)
    exact = [keys.get(normalize_name_key(q.text), []) for q in queries]
    relevant = [np.array([position[r] for r in q.relevant if r in position]) for q in queries]
    return EvalSet(name, tools, ids, raw, queries, list(texts), rows, relevant, exact)


def demo_tools() -> tuple[list[ToolDefinition], list[dict]]:
    """The tools of the bundled real catalogs, each with its catalog's server block (as `raw`)."""
    import json

    from service.catalog.files import DEMO_CATALOGS

    tools, raw = [], []
    for path in sorted(DEMO_CATALOGS.glob("*.json")):
        data = json.loads(path.read_text())
        for t in load_catalog_file(path).tools:
            tools.append(ToolDefinition(**t))
            raw.append({"server_info": data.get("server") or {}})
    return tools, raw


def load_demo_set() -> EvalSet:
    """The bundled real catalogs with the labelled queries of tests/fixtures/retrieval/real_catalog_queries.jsonl."""
    tools, raw = demo_tools()
    ids = [t.qualified_name for t in tools]
    position = {tool_id: i for i, tool_id in enumerate(ids)}
    queries = load_queries(Path(__file__).resolve().parents[1] / "tests/fixtures/retrieval/real_catalog_queries.jsonl")
    texts: dict[str, int] = {}
    rows = [[texts.setdefault(t, len(texts)) for t in [q.text, *split_intents(q.text)]] for q in queries]
    relevant = [np.array([position[r] for r in q.relevant]) for q in queries]
    return EvalSet("demo", tools, ids, raw, queries, list(texts), rows, relevant, [[] for _ in queries])


def dense_signal(cache: EmbeddingCache, s: EvalSet, doc_texts: Sequence[str]) -> np.ndarray:
    """Cosine of every text with every document text."""
    q = cache.embed(s.texts)
    d = cache.embed(list(doc_texts))
    return q @ d.T


def _sparse_matrix(vectors: Sequence[SparseVector], columns: dict[int, int]) -> sparse.csr_matrix:
    rows, cols, vals = [], [], []
    for r, v in enumerate(vectors):
        for i, x in zip(v.indices, v.values, strict=True):
            rows.append(r)
            cols.append(columns.setdefault(i, len(columns)))
            vals.append(x)
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(vectors), 1 << 22))


def lexical_signal(s: EvalSet, doc_vectors: Sequence[SparseVector], encoder: Bm25Encoder | None = None) -> np.ndarray:
    """BM25 scores: query terms weight 1, documents carry tf saturation, IDF as Qdrant's Modifier.IDF."""
    encoder = encoder or Bm25Encoder()
    columns: dict[int, int] = {}
    d = _sparse_matrix(doc_vectors, columns)
    q = _sparse_matrix([encoder.encode_query(t) for t in s.texts], columns)
    n_docs = d.shape[0]
    df = np.asarray((d > 0).sum(axis=0)).ravel()
    idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    d = d.multiply(idf).tocsr()
    return np.asarray((q @ d.T).todense(), dtype=np.float32)


def zclip(scores: np.ndarray, hits: np.ndarray | None = None, std_floor: float = 0.0) -> np.ndarray:
    """Per-row z-scores over each row's top 100 (among hits), everything below the 100th clipped to its z.

    std_floor > 0 divides by max(std, std_floor): a row whose top scores are bunched gets smaller z-scores."""
    s = scores.astype(np.float64)
    if hits is not None:
        s = np.where(hits, s, -np.inf)
    k = min(TOP, s.shape[1])
    top = -np.partition(-s, k - 1, axis=1)[:, :k]
    finite = np.isfinite(top)
    count = finite.sum(axis=1, keepdims=True)
    top0 = np.where(finite, top, 0.0)
    mean = top0.sum(axis=1, keepdims=True) / np.maximum(count, 1)
    var = (np.where(finite, (top0 - mean) ** 2, 0.0)).sum(axis=1, keepdims=True) / np.maximum(count, 1)
    std = np.maximum(np.sqrt(var), std_floor)
    floor_raw = np.where(finite, top, np.inf).min(axis=1, keepdims=True)
    ok = (std > 1e-9) & (count > 0)
    z = np.where(ok, (s - mean) / np.where(ok, std, 1.0), 0.0)
    floor = np.where(ok, (floor_raw - mean) / np.where(ok, std, 1.0), 0.0)
    z = np.where(np.isfinite(z), z, -np.inf)
    return np.maximum(z, floor)


def fused_scores(
    s: EvalSet,
    weights: dict[str, float],
    z: dict[str, np.ndarray],
    row_weights: Callable[[EvalSet, str], np.ndarray] | None = None,
) -> np.ndarray:
    """Weighted sum of z-scores per text (row_weights: optional per-text multipliers per signal)."""
    total = None
    for signal, w in weights.items():
        if w == 0.0:
            continue
        part = w * z[signal]
        if row_weights is not None:
            part = part * row_weights(s, signal)[:, None]
        total = part if total is None else total + part
    assert total is not None
    return total


def query_scores(s: EvalSet, per_text: np.ndarray, part_penalty: float | None = None) -> np.ndarray:
    """Max over the whole request and its parts (each part `part_penalty` lower, the service's default unless
    given), exact names first."""
    penalty = SearchSettings().part_penalty if part_penalty is None else part_penalty
    out = np.empty((len(s.queries), per_text.shape[1]))
    for i, rows in enumerate(s.text_rows):
        out[i] = per_text[rows[0]]
        if len(rows) > 1:
            out[i] = np.maximum(out[i], per_text[rows[1:]].max(axis=0) - penalty)
        if s.exact[i]:
            out[i, s.exact[i]] += 1e6
    return out


def metrics(s: EvalSet, scores: np.ndarray, mask: np.ndarray | None = None) -> dict[str, float]:
    """R@1/5/10, NDCG@10 and MRR (ties broken by catalog order)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    rank = np.empty_like(order)
    rank[np.arange(order.shape[0])[:, None], order] = np.arange(order.shape[1])[None, :]
    sums = {"recall@1": 0.0, "recall@5": 0.0, "recall@10": 0.0, "ndcg@10": 0.0, "mrr": 0.0}
    idx = range(len(s.queries)) if mask is None else np.flatnonzero(mask)
    n = 0
    for i in idx:
        rel = s.relevant[i]
        if len(rel) == 0:
            continue
        n += 1
        r = rank[i, rel]
        for k in (1, 5, 10):
            sums[f"recall@{k}"] += (r < k).sum() / len(rel)
        dcg = sum(1 / math.log2(x + 2) for x in r if x < 10)
        ideal = sum(1 / math.log2(j + 2) for j in range(min(10, len(rel))))
        sums["ndcg@10"] += dcg / ideal
        best = r.min()
        sums["mrr"] += 1 / (best + 1) if best < TOP else 0.0
    return {k: round(v / max(n, 1), 4) for k, v in sums.items()}


def base_signals(cache: EmbeddingCache, s: EvalSet) -> None:
    """The four signals of the service today."""
    docs = [build_document(t) for t in s.tools]
    for f in ("name", "description", "params"):
        s.signals[f] = dense_signal(cache, s, [getattr(d, f) for d in docs])
    encoder = Bm25Encoder()
    s.signals["lexical"] = lexical_signal(s, [encoder.encode_document(d.lexical) for d in docs])
