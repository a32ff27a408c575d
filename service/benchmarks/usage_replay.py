"""`toolscout bench learning --signal usage`: does the usage signal help on queries it has not seen?

Per dev set, two splits of the labelled queries:
  - by query: a seeded half is the history, the other half the test;
  - by tool: half of the tools are "known"; the history is the history-half queries of known tools only, the
    test is the test-half queries whose relevant tools are all unknown (no usage vector can help them, only hurt).
The history is replayed through the real search in one scope: each search is logged with its scope, and when a
relevant tool is in its top 10 the agent calls it (status ok, with the search_id; every relevant tool it sees, as an
agent does with a request for several tools). The real refresh then builds
the usage vectors, and the test queries are searched again, with the usage signal alone ("after") and with the query
adapter trained on the same evidence too ("after with the adapter", unless learning.query_adapter_enabled is off).
Reported per split: R@1, R@5 and MRR before and after, the adapter's training (queries, seconds, its early stop),
memory and the search time with and without it, and how many test rankings moved in another scope (must be 0)."""

from __future__ import annotations

import random
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from indexer.index.base import SearchFilter
from service.catalog.files import CatalogFile, load_catalog_file
from service.catalog.service import register_tools
from service.db.models import Execution, Search
from service.resources import Resources, build_resources, close_resources, start_resources
from service.search.evaluation import Query, load_queries, query_metrics
from service.search.service import start_search
from service.settings import Settings
from service.usage.adapter_training import refresh_maps
from service.usage.signal import UsageVectors, refresh_usage

DEPTH = 100
AGENT_DEPTH = 10  # the agent calls a relevant tool it sees this high
OTHER_SCOPE = "another-tenant"
AGENT = "agent"  # the caller of every replayed search and call


def split_by_query(queries: list[Query], seed: int) -> tuple[list[Query], list[Query]]:
    shuffled = queries[:]
    random.Random(seed).shuffle(shuffled)
    half = len(shuffled) // 2
    return shuffled[:half], shuffled[half:]


def split_by_tool(queries: list[Query], seed: int) -> tuple[list[Query], list[Query]]:
    history, test = split_by_query(queries, seed)
    tools = sorted({t for q in queries for t in q.relevant})
    known = set(random.Random(seed + 7).sample(tools, len(tools) // 2))
    return [q for q in history if q.relevant <= known], [q for q in test if not q.relevant & known]


async def _ranked(resources: Resources, text: str, scope: str | None) -> list[str]:
    """The agent's ranking (the one caller whose history is replayed: its own history counts in full)."""
    assert resources.retriever is not None
    outcome = await resources.retriever.search(text, DEPTH, SearchFilter(), caller_id=AGENT, scope=scope)
    return [r.name for r in outcome.results]


def _summary(rows: list[dict[str, float]]) -> dict[str, float]:
    n = len(rows) or 1
    return {
        key: round(sum(r[metric] for r in rows) / n, 4)
        for key, metric in (("R@1", "recall@1"), ("R@5", "recall@5"), ("MRR", "mrr"))
    }


async def _replay_history(resources: Resources, scope: str, history: list[Query], to_id: dict[str, str]) -> int:
    """Search each history query, log it in `scope`, and log a successful call of each relevant tool it found."""
    now = datetime.now(UTC) - timedelta(seconds=1)  # each split after the last: the refresh reads on
    searches, executions = [], []
    for i, query in enumerate(history):
        ranked = await _ranked(resources, query.text, None)
        found = [name for name in ranked[:AGENT_DEPTH] if to_id.get(name, name) in query.relevant]
        search_id, at = str(uuid.uuid4()), now - timedelta(milliseconds=len(history) - i)
        searches.append(
            {
                "id": search_id,
                "caller": AGENT,
                "scope": scope,
                "query": query.text,
                "k": DEPTH,
                "results": [],
                "result_count": len(ranked),
                "latency_ms": 1.0,
                "created_at": at,
            }
        )
        executions.extend(
            {
                "id": str(uuid.uuid4()),
                "caller": AGENT,
                "tool": name,
                "server_id": name.split("__")[0],
                "search_id": search_id,
                "scope": scope,
                "arguments_digest": "0" * 64,
                "status": "ok",
                "duration_ms": 100.0,
                "input_tokens": 10,
                "output_tokens": 10,
                "started_at": at,
                "finished_at": at + timedelta(milliseconds=100),
            }
            for name in found
        )
    async with resources.session() as session:
        await session.execute(insert(Search), searches)
        if executions:
            await session.execute(insert(Execution), executions)
        await session.commit()
    return len(executions)


async def _one_split(
    resources: Resources, scope: str, history: list[Query], test: list[Query], to_id: dict[str, str]
) -> dict:
    assert resources.usage is not None
    before = {q.qid: await _ranked(resources, q.text, scope) for q in test}
    calls = await _replay_history(resources, scope, history, to_id)
    await refresh_usage(resources, resources.usage)
    learning = resources.settings.learning
    adapter_on = learning.query_adapter_enabled
    learning.query_adapter_enabled = False
    after = {q.qid: await _ranked(resources, q.text, scope) for q in test}
    adapter: dict[str, Any] = {}
    if adapter_on:
        learning.query_adapter_enabled = True
        await refresh_maps(resources, resources.usage, wait=True, scope_filter=lambda _: SearchFilter())
        maps = resources.usage.maps.get(scope)
        began = time.perf_counter()
        with_adapter = {q.qid: await _ranked(resources, q.text, scope) for q in test}
        took = time.perf_counter() - began
        learning.query_adapter_enabled = False
        began = time.perf_counter()
        for q in test:
            await _ranked(resources, q.text, scope)
        took_without = time.perf_counter() - began
        learning.query_adapter_enabled = True
        trained = maps.report.get(AGENT) if maps is not None else None
        adapter = {
            "after_with_adapter": with_adapter,
            "trained": None
            if trained is None
            else {
                "queries": trained.examples,
                "seconds": round(trained.seconds, 2),
                "held_out_r5": [trained.held_base, trained.held_best],
                "epochs": trained.epochs,
                "kept": trained.matrix is not None,
            },
            "kb_per_scope": round(maps.nbytes() / 1024) if maps is not None else 0,
            "search_ms_with_without": [round(1000 * took / len(test), 3), round(1000 * took_without / len(test), 3)],
        }
    other_moved = 0
    for q in test:
        other_moved += int(await _ranked(resources, q.text, OTHER_SCOPE) != before[q.qid])
    metrics: dict[str, Any] = {}
    rankings = [("before", before), ("after", after)]
    if "after_with_adapter" in adapter:
        rankings.append(("after with the adapter", adapter.pop("after_with_adapter")))
        metrics["adapter"] = adapter
    for label, ranking in rankings:
        metrics[label] = _summary([query_metrics([to_id.get(n, n) for n in ranking[q.qid]], q.relevant) for q in test])
    return {"history": len(history), "calls": calls, "test": len(test), **metrics, "moved_in_other_scope": other_moved}


async def replay_usage(catalog_path: Path, queries_path: Path, max_queries: int | None, seed: int) -> dict:
    """Both splits on one dev set and one index, each in its own scope (one split's history never feeds the
    other: that is the scoping under test too)."""
    catalog: CatalogFile = load_catalog_file(catalog_path)
    queries = load_queries(queries_path, max_queries, seed)
    out: dict[str, Any] = {"catalog": str(catalog_path), "tools": len(catalog.tools), "queries": len(queries)}
    with tempfile.TemporaryDirectory(prefix="toolscout-usage-") as tmp:
        settings = Settings(data_dir=Path(tmp), demo_catalog=False)
        settings.learning.refresh_lag_seconds = 0.0
        # Every text embedded once: a re-embedded text (evicted, then batched differently) differs in the last
        # digits, and the rankings it moves are not the signal's doing.
        settings.embedding.cache_size = 1_000_000
        resources = build_resources(settings)
        await start_resources(resources)
        await start_search(resources)
        resources.usage = UsageVectors()
        try:
            await register_tools(resources, catalog.tools)
            for name, split in (("by query", split_by_query), ("by tool", split_by_tool)):
                history, test = split(queries, seed)
                out[name] = await _one_split(resources, f"agents {name}", history, test, catalog.ids)
        finally:
            await close_resources(resources)
    return out
