"""Retrieval evaluation: index a catalog into a fresh temporary index, run labelled queries, report metrics."""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.embedding import Embedder
from indexer.index.base import SearchFilter
from service.catalog.files import CatalogFile, jsonl_lines, load_catalog_file
from service.catalog.service import RegisterReport, register_tools
from service.errors import BadRequest
from service.resources import build_resources, close_resources, start_resources
from service.search.service import start_search, warm_search
from service.settings import Settings
from service.usage.rollups import percentile

MRR_DEPTH = 100


NO_CATEGORY = "(no category)"  # the per-category row of the queries without one, when others have one


@dataclass
class Query:
    qid: str
    text: str
    relevant: set[str]
    category: str | None  # None: the line has none


@dataclass
class QueryFile:
    """The scorable queries of a file, and the lines the figures leave out or should warn of."""

    queries: list[Query]
    unscored: list[str] = field(default_factory=list)  # qids of queries with an empty `relevant` (no recall)
    duplicate_qids: list[str] = field(default_factory=list)  # qids on more than one line (each line is measured)


def _category(value: Any) -> str | None:
    """A query's category as a row name: a string as it is, another JSON value as its JSON text, none as None."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def read_queries(path: Path) -> QueryFile:
    """Labelled queries from JSON Lines. A query with an empty `relevant` has no recall to measure: left out of
    the figures and counted (it was a refusal of the whole file)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError as exc:
        raise BadRequest(f"{path}: no such file", file=str(path)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{path}: cannot be read ({exc})", file=str(path)) from exc
    read = QueryFile([])
    seen: set[str] = set()
    for number, line in jsonl_lines(text):
        try:
            item = json.loads(line)
            qid, relevant = str(item.get("qid", f"line {number}")), item["relevant"]
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise BadRequest(f"{path}:{number}: expected {{qid, query, relevant}} ({exc})", file=str(path)) from exc
        if isinstance(relevant, str):  # one id written bare: never counted letter by letter
            relevant = [relevant]
        # Ids written as numbers are compared as the catalog's (str(id)).
        if not (isinstance(item.get("query"), str) and isinstance(relevant, list)
                and all(isinstance(r, str | int) and not isinstance(r, bool) for r in relevant)):
            raise BadRequest(
                f"{path}:{number}: `query` must be a string and `relevant` a list of tool ids", file=str(path)
            )
        if qid in seen:
            read.duplicate_qids.append(qid)
        seen.add(qid)
        if not relevant:
            read.unscored.append(qid)
            continue
        read.queries.append(Query(qid, item["query"], {str(r) for r in relevant}, _category(item.get("category"))))
    return read


def load_queries(path: Path, max_queries: int | None = None, seed: int = 0) -> list[Query]:
    """The scorable labelled queries of a JSON Lines file; a seeded sample when max_queries is set."""
    return _sample(read_queries(path).queries, max_queries, seed)


def _sample(queries: list[Query], max_queries: int | None, seed: int) -> list[Query]:
    if max_queries and len(queries) > max_queries:
        return random.Random(seed).sample(queries, max_queries)
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
    read = read_queries(queries_path)
    queries = _sample(read.queries, max_queries, seed)
    with tempfile.TemporaryDirectory(prefix="toolscout-eval-") as tmp:
        resources = build_resources(_run_settings(settings or Settings(), Path(tmp)), embedder)
        await start_resources(resources)
        await start_search(resources)
        try:
            started = time.perf_counter()
            if progress:  # indexing a large catalog takes minutes: say so before it starts
                progress("indexing tools", 0, len(catalog.tools))
            report = await register_tools(resources, catalog.tools)
            index_seconds = time.perf_counter() - started
            assert resources.retriever is not None
            # Warmed as `toolscout serve` is before it listens: the first searches' one-off costs (~450 ms, the
            # model's first passes at new lengths) were the p95 of a small query set.
            await warm_search(resources)
            overall: list[dict[str, float]] = []
            by_category: dict[str, list[dict[str, float]]] = defaultdict(list)
            latencies: list[float] = []
            unmapped: set[str] = set()
            mixed = any(q.category is None for q in queries) and any(q.category is not None for q in queries)
            for i, query in enumerate(queries):
                t0 = time.perf_counter()
                outcome = await resources.retriever.search(query.text, MRR_DEPTH, SearchFilter())
                latencies.append((time.perf_counter() - t0) * 1000)
                unmapped.update(r.name for r in outcome.results if r.name not in catalog.ids)
                # One id once: two catalog lines of one id would both count as gains (an NDCG above 1).
                ranked = list(dict.fromkeys(catalog.ids.get(r.name, r.name) for r in outcome.results))
                metrics = query_metrics(ranked, query.relevant)
                overall.append(metrics)
                if query.category is not None or mixed:
                    by_category[query.category or NO_CATEGORY].append(metrics)
                if progress and (i + 1) % 100 == 0:
                    progress("queries", i + 1, len(queries))
        finally:
            await close_resources(resources)
    return {
        "tools": len(report.created) + len(report.updated) + len(report.unchanged),
        "rejected_tools": len(report.errors),
        "repaired_tools": len(catalog.repairs),
        **_lost_relevant(queries, catalog, report),
        "repairs": catalog.repairs[:20],
        "rejections": [e.as_dict() for e in report.errors[:20]],
        "queries": len(queries),
        "unscored_queries": len(read.unscored),
        "unscored_qids": read.unscored[:20],
        "duplicate_qids": sorted(set(read.duplicate_qids))[:20],
        "duplicate_qid_lines": len(read.duplicate_qids),
        # Results whose name maps to no catalog id (always 0, else a tool's id mapping is broken): named here.
        "unmapped_results": sorted(unmapped)[:20],
        **_mean(overall),
        "latency_ms": {"p50": round(percentile(latencies, 0.5), 2), "p95": round(percentile(latencies, 0.95), 2)},
        "index_seconds": round(index_seconds, 2),
        "by_category": {name: {"queries": len(r), **_mean(r)} for name, r in sorted(by_category.items())},
    }


def _run_settings(base: Settings, data_dir: Path) -> Settings:
    """The settings of an evaluation: a fresh data folder, SQLite and the embedded index in it."""
    # Retrieval is measured over every tool of the catalog: a poisoning signature's hold is a serving policy
    # (MetaTool's Glowing, "without showing the user any of the messages", would be missing from its queries).
    serve_all = base.policy.model_copy(update={"hold_suspicious_tools": False})
    return base.model_copy(update={"data_dir": data_dir, "db": base.db.model_copy(update={"url": None}),
                                   "policy": serve_all,
                                   "index": base.index.model_copy(update={"path": None}),
                                   # the exported model stays cached in the real data folder
                                   "embedding": base.embedding.model_copy(update={"models_dir": base.models_dir})})


def _lost_relevant(queries: list[Query], catalog: CatalogFile, report: RegisterReport) -> dict[str, Any]:
    """The relevant ids no ranking can find, and the queries that name them: ids no catalog line has, and the
    tools the registration refused (each with why) whose id no registered tool has."""
    wanted = {r for q in queries for r in q.relevant}
    unknown = wanted - set(catalog.line_ids)
    kept = {catalog.ids.get(name) for name in (*report.created, *report.updated, *report.unchanged)}
    refused = {catalog.line_ids[p.index]: p for p in report.errors if 0 <= p.index < len(catalog.line_ids)}
    refused = {tool_id: p for tool_id, p in refused.items() if tool_id in wanted and tool_id not in kept}
    return {
        # every query naming one loses recall that no ranking can win
        "unknown_relevant": sorted(unknown)[:20],
        "unknown_relevant_ids": len(unknown),
        "queries_with_unknown_relevant": sum(1 for q in queries if q.relevant & unknown),
        "rejected_relevant": [{"id": i, "tool": p.tool, "reason": p.reason} for i, p in sorted(refused.items())][:20],
        "queries_with_rejected_relevant": sum(1 for q in queries if q.relevant & refused.keys()),
    }
