"""Log retention (usage/retention.py) on SQLite and PostgreSQL: counted rows past the retention go, recent and
uncounted rows stay, the analytics answer the same after a prune, the usage signal's evidence and the searches kept
calls name stay, approvals are not touched, and two replicas prune at once without conflict."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from indexer.embedding import HashingEmbedder
from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database
from service.db.models import Approval, Execution, Search
from service.main import create_app
from service.resources import Resources, build_resources
from service.settings import DatabaseSettings, Settings
from service.usage import analytics
from service.usage.learning import refresh_stats
from service.usage.retention import PRUNE_TASK, prune_logs
from service.usage.scope import Scope
from service.usage.signal import UsageVectors, _read_evidence
from tests.conftest import make_settings
from tests.usage.test_counted_once import row

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=120)  # past the default retention of 90 days
RECENT = NOW - timedelta(days=10)


def replica(url: str, tmp_path: Path, name: str) -> Resources:
    """Resources of one replica on the shared database."""
    settings = Settings(data_dir=tmp_path / name, db=DatabaseSettings(url=url), demo_catalog=False)
    settings.learning.refresh_lag_seconds = 0.0
    settings.learning.usage_max_queries = 3
    settings.logs.prune_batch = 40  # many transactions
    resources = build_resources(settings, HashingEmbedder())
    resources.engine = create_engine_for(url)
    resources.sessionmaker = create_sessionmaker(resources.engine)
    return resources


@pytest.fixture
async def replicas(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Resources, Resources]]:
    upgrade_database(database_url)
    pair = (replica(database_url, tmp_path, "one"), replica(database_url, tmp_path, "two"))
    yield pair
    for resources in pair:
        assert resources.engine is not None
        await resources.engine.dispose()


def search(at: datetime, caller: str = "alice", query: str = "q", scope: str | None = "dev", count: int = 1) -> dict:
    results = [{"name": "a__x", "score": 1.0}] if count else []
    return {
        "id": str(uuid.uuid4()),
        "caller": caller,
        "query": query,
        "scope": scope,
        "k": 5,
        "results": results,
        "result_count": count,
        "latency_ms": 1.0,
        "created_at": at,
    }


async def insert(resources: Resources, executions: list[dict[str, Any]], searches: list[dict[str, Any]]) -> None:
    async with resources.session() as session:
        if searches:
            await session.execute(sa.insert(Search), searches)
        if executions:
            await session.execute(sa.insert(Execution), executions)
        await session.commit()


async def ids(resources: Resources, table: str) -> set[str]:
    async with resources.session() as session:
        return set((await session.scalars(sa.text(f"SELECT id FROM {table}"))).all())


async def answers(resources: Resources) -> dict[str, Any]:
    """Every analytics answer over the whole history (the unanswered searches: over the retention period)."""
    whole = Scope(since=NOW - timedelta(days=400))
    kept = Scope(since=NOW - timedelta(days=60))
    async with resources.session() as session:
        return {
            "tools": await analytics.tool_usage(session, whole),
            "days": await analytics.timeseries(session, whole, "day"),
            "hours": await analytics.timeseries(session, whole, "hour"),
            "callers": await analytics.top_callers(session, whole),
            "pairs": await analytics.cooccurrence(session, whole),
            "conversion": await analytics.conversion(session, whole),
            "no_result": await analytics.unanswered_searches(session, kept, kind="no_result"),
            "no_call": await analytics.unanswered_searches(session, kept, kind="no_call"),
            "never_found": await analytics.never_found(session, whole),
        }


async def test_counted_rows_past_the_retention_go_and_the_analytics_answer_the_same(
    replicas: tuple[Resources, Resources],
) -> None:
    one, _ = replicas
    old_searches = [search(OLD + timedelta(minutes=i), count=i % 2) for i in range(30)]
    recent_searches = [search(RECENT + timedelta(minutes=i), query=f"r{i % 3}", count=i % 2) for i in range(20)]
    old_calls = [row(at=OLD + timedelta(minutes=i), status="tool_error" if i % 4 else "ok") for i in range(50)]
    old_calls += [row("b__y", at=OLD + timedelta(minutes=i, seconds=30)) for i in range(50)]
    # An old successful call from an old search by its searcher: the usage signal's evidence, kept with its search.
    followed = old_searches[0]
    old_calls.append(row(at=OLD + timedelta(minutes=1), search_id=followed["id"]))
    recent_calls = [row(at=RECENT + timedelta(minutes=i)) for i in range(20)]
    await insert(one, old_calls + recent_calls, old_searches + recent_searches)
    assert await refresh_stats(one) == 121
    # Rows of the same age that arrive after the refresh (a spill replayed late): not counted yet.
    late_calls = [row(at=OLD + timedelta(hours=5, minutes=i)) for i in range(7)]
    late_searches = [search(OLD + timedelta(hours=5, minutes=i)) for i in range(4)]
    await insert(one, late_calls, late_searches)
    async with one.session() as session:
        session.add(
            Approval(id="old", caller="alice", tool="a__x", arguments_digest="0" * 64, expires_at=OLD, requested_at=OLD)
        )
        await session.commit()
    before = await answers(one)
    assert before["tools"][0]["calls"] == 71 and before["conversion"]["searches"] == 50

    report = await prune_logs(one)

    assert (report.executions, report.searches, report.kept_evidence, report.skipped) == (100, 29, 1, False)
    assert report.batches >= 4  # 40 rows a transaction
    expected_calls = {r["id"] for r in [old_calls[-1], *recent_calls, *late_calls]}
    expected_searches = {s["id"] for s in recent_searches + late_searches} | {followed["id"]}
    assert await ids(one, "executions") == expected_calls
    assert await ids(one, "searches") == expected_searches
    assert await ids(one, "approvals") == {"old"}
    assert await answers(one) == before
    # Counted later, the late rows go at the next prune, and the analytics still count them.
    assert await refresh_stats(one) == 7
    counted = await answers(one)
    report = await prune_logs(one)
    assert (report.executions, report.searches) == (7, 4)
    assert await ids(one, "executions") == {r["id"] for r in [old_calls[-1], *recent_calls]}
    assert await answers(one) == counted
    assert counted["tools"][0]["calls"] == 78


async def test_the_usage_signal_evidence_and_the_searches_it_names_stay(replicas: tuple[Resources, Resources]) -> None:
    one, _ = replicas
    evidence_searches = [search(OLD + timedelta(hours=i), query=f"find x {i}") for i in range(6)]
    evidence = [row(at=OLD + timedelta(hours=i, minutes=1), search_id=s["id"]) for i, s in enumerate(evidence_searches)]
    # Bob's calls naming alice's searches and alice's calls from searches without a scope teach nothing.
    borrowed = [
        row(caller="bob", at=OLD + timedelta(hours=i, minutes=2), search_id=s["id"])
        for i, s in enumerate(evidence_searches)
    ]
    unscoped = search(OLD, scope=None)
    unscoped_call = row(at=OLD + timedelta(minutes=3), search_id=unscoped["id"])
    # Carol's one old query of b__y in another scope: her latest, kept however old.
    carol = search(OLD, caller="carol", query="get y", scope="ops")
    carol_call = row("b__y", caller="carol", at=OLD + timedelta(minutes=5), search_id=carol["id"])
    await insert(one, evidence + borrowed + [unscoped_call, carol_call], evidence_searches + [unscoped, carol])
    await refresh_stats(one)
    signal_before = UsageVectors()
    await _read_evidence(one, signal_before, 100)

    report = await prune_logs(one)

    latest = {r["id"] for r in evidence[-3:]} | {carol_call["id"]}  # usage_max_queries = 3
    assert await ids(one, "executions") == latest
    assert report.kept_evidence == 4 and report.executions == 3 + 6 + 1
    assert await ids(one, "searches") == {s["id"] for s in evidence_searches[-3:]} | {carol["id"]}
    signal_after = UsageVectors()
    await _read_evidence(one, signal_after, 100)
    assert {k: u.queries for k, u in signal_after.tools.items()} == {
        k: u.queries for k, u in signal_before.tools.items()
    }
    assert [q for q, _, _ in signal_after.tools[("dev", "a__x")].queries] == ["find x 3", "find x 4", "find x 5"]


async def test_two_replicas_prune_at_once(replicas: tuple[Resources, Resources]) -> None:
    one, two = replicas
    old_calls = [row(f"t{i % 7}__x", at=OLD + timedelta(seconds=i)) for i in range(600)]
    old_searches = [search(OLD + timedelta(seconds=i)) for i in range(300)]
    await insert(one, old_calls, old_searches)
    await refresh_stats(one)
    before = await answers(one)
    reports = list(await asyncio.gather(prune_logs(one), prune_logs(two), prune_logs(one), prune_logs(two)))
    # One that found another replica pruning skipped its turn; the next pass finishes whatever is left.
    reports.append(await prune_logs(two))
    assert sum(r.executions for r in reports) == 600
    assert sum(r.searches for r in reports) == 300
    assert await ids(one, "executions") == set() and await ids(one, "searches") == set()
    assert await answers(one) == before


async def test_zero_keeps_everything(replicas: tuple[Resources, Resources]) -> None:
    one, _ = replicas
    one.settings.logs.retention_days = 0
    await insert(one, [row(at=OLD)], [search(OLD)])
    await refresh_stats(one)
    assert (await prune_logs(one)).executions == 0
    assert len(await ids(one, "executions")) == 1 and len(await ids(one, "searches")) == 1


async def test_the_service_prunes_in_the_background(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        resources = app.state.resources
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as http:
            ready = (await http.get("/readyz")).json()
        assert resources.supervisor.status[PRUNE_TASK].state == "running"
        assert ready["background"][PRUNE_TASK]["state"] == "running"
    assert resources.supervisor.status[PRUNE_TASK].state == "stopped"
