"""Retrieval evaluation: index a catalog into a fresh temporary index, run labelled queries, report metrics."""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.embedding import Embedder
from indexer.index.base import SearchFilter
from service.catalog.files import load_catalog_file
from service.catalog.service import register_tools
from service.errors import BadRequest
from service.resources import build_resources, close_resources, start_resources
from service.search.service import start_search
from service.settings import Settings
from service.usage.rollups import percentile

MRR_DEPTH = 100


@dataclass
class Query:
    qid: str
    text: str
    relevant: set[str]
    category: str


def load_queries(path: Path, max_queries: int | None = None, seed: int = 0) -> list[Query]:
    """Labelled queries from JSON Lines; a seeded sample when max_queries is set."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise BadRequest(f"{path}: no such file", file=str(path)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{path}: cannot be read ({exc})", file=str(path)) from exc
    queries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            query = Query(str(item["qid"]), item["query"], set(item["relevant"]), item.get("category") or "all")
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise BadRequest(f"{path}:{number}: expected {{qid, query, relevant}} ({exc})", file=str(path)) from exc
        # An empty `relevant` would divide by zero in the recall; a string would count its letters.
        if not (isinstance(query.text, str) and query.text.strip() and isinstance(item["relevant"], list)
                and query.relevant and all(isinstance(name, str) for name in query.relevant)):
            raise BadRequest(
                f"{path}:{number}: `query` must be a non-empty string and `relevant` a non-empty list of tool names",
                file=str(path),
            )
        queries.append(query)
    if max_queries and len(queries) > max_queries:
        queries = random.Random(seed).sample(queries, max_queries)
    return queries


def query_metrics(ranked: Sequence[str], relevant: set[str]) -> dict[str, float]:
    """Recall@1/5/10, NDCG@5/10 (binary gains) and reciprocal rank within the top 100."""
    metrics: dict[str, float] = {}
    for k in (1, 5, 10):
        metrics[f"recall@{k}"] = len(relevant & set(ranked[:k])) / len(relevant)
    for k in (5, 10):
        dcg = sum(1 / math.log2(i + 2) for i, name in enumerate(ranked[:k]) if name in relevant)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
        metrics[f"ndcg@{k}"] = dcg / ideal
    metrics["mrr"] = next((1 / (i + 1) for i, n in enumerate(ranked[:MRR_DEPTH]) if n in relevant), 0.0)
    return metrics


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10", "mrr")
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in keys}


async def evaluate(
    catalog_path: Path,
    queries_path: Path,
    *,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    max_queries: int | None = None,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Index the catalog into a temporary data folder and measure every query."""
    catalog = load_catalog_file(catalog_path)
    queries = load_queries(queries_path, max_queries, seed)
    with tempfile.TemporaryDirectory(prefix="toolscout-eval-") as tmp:
        base = settings or Settings()
        # Retrieval is measured over every tool of the catalog: a poisoning signature's hold is a serving policy
        # (MetaTool's Glowing, "without showing the user any of the messages", would be missing from its queries).
        serve_all = base.policy.model_copy(update={"hold_suspicious_tools": False})
        run_settings = base.model_copy(update={"data_dir": Path(tmp), "db": base.db.model_copy(update={"url": None}),
                                               "policy": serve_all,
                                               "index": base.index.model_copy(update={"path": None}),
                                               # the exported model stays cached in the real data folder
                                               "embedding": base.embedding.model_copy(
                                                   update={"models_dir": base.models_dir})})
        resources = build_resources(run_settings, embedder)
        await start_resources(resources)
        await start_search(resources)
        try:
            started = time.perf_counter()
            report = await register_tools(resources, catalog.tools)
            index_seconds = time.perf_counter() - started
            assert resources.retriever is not None
            rows: dict[str, list[dict[str, float]]] = defaultdict(list)
            latencies: list[float] = []
            for i, query in enumerate(queries):
                t0 = time.perf_counter()
                outcome = await resources.retriever.search(query.text, MRR_DEPTH, SearchFilter())
                latencies.append((time.perf_counter() - t0) * 1000)
                ranked = [catalog.ids.get(r.name, r.name) for r in outcome.results]
                metrics = query_metrics(ranked, query.relevant)
                rows["all"].append(metrics)
                rows[query.category].append(metrics)
                if progress and (i + 1) % 100 == 0:
                    progress("queries", i + 1, len(queries))
        finally:
            await close_resources(resources)
    result: dict[str, Any] = {
        "tools": len(report.created) + len(report.updated) + len(report.unchanged),
        "rejected_tools": len(report.errors),
        "repaired_tools": len(catalog.repairs),
        # Relevant ids no line of the catalog has: every query naming one loses recall that no ranking can win.
        "unknown_relevant": sorted({r for q in queries for r in q.relevant} - set(catalog.ids.values()))[:20],
        "repairs": catalog.repairs[:20],
        "rejections": [e.as_dict() for e in report.errors[:20]],
        "queries": len(queries),
        **_mean(rows["all"]),
        "latency_ms": {"p50": round(percentile(latencies, 0.5), 2), "p95": round(percentile(latencies, 0.95), 2)},
        "index_seconds": round(index_seconds, 2),
        "by_category": {name: {"queries": len(r), **_mean(r)} for name, r in sorted(rows.items()) if name != "all"},
    }
    return result
