"""The analytics aggregates on SQLite and on PostgreSQL, over hand-made rows whose answers are worked out
by hand in the comments. The rows go through the real statistics refresh, which folds them into the rollups
that analytics read.

Latency percentiles are estimates from buckets [2^((k-1)/2), 2^(k/2)) ms: the nearest-rank sample's bucket,
at the geometric middle of its share of the bucket, capped by the largest duration seen."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, text

from indexer.embedding import HashingEmbedder
from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database
from service.db.models import Execution, Search, Server, Tool
from service.resources import Resources, build_resources
from service.settings import Settings
from service.usage import analytics
from service.usage.analytics import Scope
from service.usage.learning import refresh_stats

POSTGRES_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
WINDOW = Scope(since=T0 - timedelta(days=1), until=T0 + timedelta(days=2))
GH, FS, SECRET, WRITE = "gh__create_issue", "fs__read", "secret__get", "fs__write"
S1, S2, S3, S4, S5 = (f"00000000-0000-0000-0000-00000000000{i}" for i in range(1, 6))


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One fresh database per engine for this module; the PostgreSQL one is dropped at the end."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('analytics') / 'analytics.db'}"
        return
    name = f"toolscout_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def ex(
    n: int,
    caller: str,
    tool: str,
    status: str,
    ms: float,
    minutes: float,
    search: str | None = None,
    error: str | None = None,
) -> Execution:
    at = T0 + timedelta(minutes=minutes)
    return Execution(
        id=f"e{n:02d}",
        caller=caller,
        tool=tool,
        server_id=tool.split("__")[0],
        search_id=search,
        arguments_digest="0" * 64,
        status=status,
        error_class=error,
        duration_ms=ms,
        started_at=at,
        finished_at=at + timedelta(milliseconds=ms),
    )


def se(search_id: str, caller: str, query: str, minutes: float, names: list[str]) -> Search:
    return Search(
        id=search_id,
        caller=caller,
        query=query,
        k=5,
        created_at=T0 + timedelta(minutes=minutes),
        results=[{"name": n, "score": 1.0 - i / 10} for i, n in enumerate(names)],
        result_count=len(names),
    )


def executions() -> list[Execution]:
    return [
        # gh__create_issue: durations 100 200 300 400 1000 (one per bucket), mean 400
        ex(1, "alice", GH, "ok", 100, 0, S1),
        ex(2, "alice", GH, "ok", 200, 2),
        ex(3, "bob", GH, "tool_error", 300, 3),  # the tool answered isError: no exception class
        ex(4, "bob", GH, "ok", 400, 70),
        ex(5, "alice", GH, "timeout", 1000, 71, error="UpstreamTimeout"),
        # fs__read: 10 30 20 reached the server; the invalid call never reached it
        ex(6, "alice", FS, "ok", 10, 1, S1),
        ex(7, "alice", FS, "invalid_arguments", 0, 4, error="InvalidArguments"),
        ex(8, "carol", FS, "ok", 30, 5, S2),
        ex(9, "carol", FS, "ok", 20, 24 * 60),
        # secret__get: one call, one refused by policy
        ex(10, "alice", SECRET, "ok", 50, 6),
        ex(11, "alice", SECRET, "denied", 0, 7, error="PermissionDenied"),
    ]


def searches() -> list[Search]:
    return [
        se(S1, "alice", "open an issue", -1, [GH, FS]),
        se(S2, "carol", "read a file", 4, [FS]),
        se(S3, "bob", "delete everything", 8, []),
        se(S4, "bob", "delete everything", 9, []),
        se(S5, "alice", "list secrets", 65, [SECRET]),
    ]


@pytest.fixture(scope="module")
async def resources(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Resources]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"))
    settings.db.url = database_url
    settings.learning.refresh_lag_seconds = 0.0
    res = build_resources(settings, HashingEmbedder())
    upgrade_database(database_url)
    res.engine = create_engine_for(database_url)
    res.sessionmaker = create_sessionmaker(res.engine)
    async with res.session() as session:
        session.add_all([Server(id=s) for s in ("gh", "fs", "secret", "old")])
        await session.flush()
        session.add_all(
            [
                Tool(
                    qualified_name=name,
                    server_id=name.split("__")[0],
                    name=name.split("__")[1],
                    content_hash="h",
                    deprecated=name == "old__gone",
                )
                for name in (GH, FS, SECRET, WRITE, "old__gone")
            ]
        )
        session.add_all(executions() + searches())
        await session.commit()
    await refresh_stats(res)  # fills tool_stats and tool_search_stats from the logs
    yield res
    await res.engine.dispose()


async def test_tool_usage_counts_percentiles_and_errors(resources: Resources) -> None:
    async with resources.session() as session:
        rows = await analytics.tool_usage(session, WINDOW)
    by_tool = {r["tool"]: r for r in rows}
    assert [r["tool"] for r in rows] == [GH, FS, SECRET]  # by calls: 5, 4, 2
    gh = by_tool[GH]
    assert (gh["calls"], gh["successes"], gh["success_rate"], gh["from_search"]) == (5, 3, 0.6, 1)
    # p50 = 3rd = 300 in [256, 362): 256 * 2^(1/4);
    # p95 = 5th = 1000 in [724, 1024) capped at 1000: sqrt(724 * 1000)
    assert gh["latency_ms"] == {
        "mean": 400.0,
        "p50": pytest.approx(2 ** (33 / 4), abs=1e-3),
        "p95": pytest.approx((2**9.5 * 1000) ** 0.5, abs=1e-3),
        "max": 1000.0,
        "calls": 5,
    }
    assert gh["errors"] == {"timeout": 1, "tool_error": 1}  # statuses, never exception class names
    assert (gh["input_tokens"], gh["output_tokens"]) == (0, 0)
    fs = by_tool[FS]
    assert (fs["calls"], fs["successes"], fs["success_rate"]) == (4, 3, 0.75)
    # p50 = 2nd = 20 in [16, 22.6): 16 * 2^(1/4); p95 = 3rd = 30 in [22.6, 32) capped at 30: sqrt(22.63 * 30)
    assert fs["latency_ms"] == {
        "mean": 20.0,
        "p50": pytest.approx(2 ** (17 / 4), abs=1e-3),
        "p95": pytest.approx((2**4.5 * 30) ** 0.5, abs=1e-3),
        "max": 30.0,
        "calls": 3,
    }
    assert fs["errors"] == {"invalid_arguments": 1}
    # One call of 50 in [45.25, 64) capped at 50.
    assert by_tool[SECRET]["latency_ms"]["p50"] == pytest.approx((2**5.5 * 50) ** 0.5, abs=1e-3)
    assert by_tool[SECRET]["errors"] == {"denied": 1}


async def test_scope_of_a_non_admin_reader(resources: Resources) -> None:
    """alice may not use secret__get: her rows only, and nothing about that tool."""
    scope = Scope(WINDOW.since, WINDOW.until, caller="alice", tools=frozenset({GH, FS, WRITE}))
    async with resources.session() as session:
        rows = await analytics.tool_usage(session, scope)
        series = await analytics.timeseries(session, scope, "day")
        pairs = await analytics.cooccurrence(session, scope)
        callers = await analytics.top_callers(session, scope)
        funnel = await analytics.conversion(session, scope)
        hidden = await analytics.never_found(session, Scope(tools=frozenset({GH})))
    by_tool = {r["tool"]: r for r in rows}
    assert set(by_tool) == {GH, FS}
    # alice's gh calls: 100 200 1000 -> p50 = 2nd = 200 in [181, 256): 2^(31/4); p95 = 3rd as above
    assert by_tool[GH]["calls"] == 3 and by_tool[GH]["latency_ms"]["p50"] == pytest.approx(2 ** (31 / 4), abs=1e-3)
    assert by_tool[GH]["latency_ms"]["p95"] == pytest.approx((2**9.5 * 1000) ** 0.5, abs=1e-3)
    assert by_tool[GH]["errors"] == {"timeout": 1}
    # alice's one fs call of 10 in [8, 11.3) capped at 10
    assert by_tool[FS]["calls"] == 2 and by_tool[FS]["latency_ms"]["p95"] == pytest.approx(80**0.5, abs=1e-3)
    assert [(b["bucket"], b["calls"], b["callers"]) for b in series] == [("2026-03-02", 5, 1)]
    assert series[0]["searches"] == 2  # s1 and s5, alice's own
    assert pairs == [{"tools": [FS, GH], "count": 3}]
    assert [(c["caller"], c["calls"], c["tools"]) for c in callers] == [("alice", 5, 2)]
    assert funnel == {
        "searches": 2,
        "searches_followed_by_call": 1,
        "conversion_rate": 0.5,
        "searches_without_result": 0,
        "calls": 5,
        "calls_from_search": 2,
        "calls_by_name": 3,
    }
    assert hidden == []  # gh was found; nothing else is visible


async def test_timeseries_per_hour_and_day(resources: Resources) -> None:
    async with resources.session() as session:
        hours = await analytics.timeseries(session, WINDOW, "hour")
        days = await analytics.timeseries(session, WINDOW, "day")
    assert [
        (
            h["bucket"],
            h["calls"],
            h["successes"],
            h["failures"],
            h["callers"],
            h["searches"],
            h["empty_searches"],
        )
        for h in hours
    ] == [
        ("2026-03-02T09:00:00Z", 0, 0, 0, 0, 1, 0),
        ("2026-03-02T10:00:00Z", 8, 5, 3, 3, 3, 2),
        ("2026-03-02T11:00:00Z", 2, 1, 1, 2, 1, 0),
        ("2026-03-03T10:00:00Z", 1, 1, 0, 1, 0, 0),
    ]
    # The calls that reached the server at 10:00: (100 + 200 + 300 + 10 + 30 + 50) / 6
    assert hours[1]["mean_latency_ms"] == 115.0 and hours[2]["mean_latency_ms"] == 700.0
    assert hours[0]["mean_latency_ms"] is None and hours[0]["success_rate"] is None
    assert [(d["bucket"], d["calls"], d["callers"], d["searches"], d["empty_searches"]) for d in days] == [
        ("2026-03-02", 10, 3, 5, 2),
        ("2026-03-03", 1, 1, 0, 0),
    ]


async def test_top_callers(resources: Resources) -> None:
    async with resources.session() as session:
        rows = await analytics.top_callers(session, WINDOW)
    assert [(r["caller"], r["calls"], r["successes"], r["tools"], r["searches"]) for r in rows] == [
        ("alice", 7, 4, 3, 2),
        ("bob", 2, 1, 1, 2),
        ("carol", 2, 2, 1, 1),
    ]
    assert [r["last_active_day"] for r in rows] == [
        "2026-03-02",
        "2026-03-02",
        "2026-03-03",
    ]
    assert rows[0]["success_rate"] == round(4 / 7, 4)


async def test_tools_used_together(resources: Resources) -> None:
    """alice, denied call left out: gh(0s) fs(60) gh(120) fs(240) secret(360) gh(4260): within 300 s the
    transitions fs-gh x3 and fs-secret x1; bob and carol only repeat one tool."""
    async with resources.session() as session:
        pairs = await analytics.cooccurrence(session, WINDOW)
        alice = await analytics.cooccurrence(
            session, Scope(WINDOW.since, WINDOW.until, caller="alice", tools=frozenset({FS, SECRET}))
        )
    assert pairs == [{"tools": [FS, GH], "count": 3}, {"tools": [FS, SECRET], "count": 1}]
    assert alice == [{"tools": [FS, SECRET], "count": 1}]


async def test_conversion_and_unanswered_searches(resources: Resources) -> None:
    async with resources.session() as session:
        funnel = await analytics.conversion(session, WINDOW)
        empty = await analytics.unanswered_searches(session, WINDOW, "no_result")
        no_call = await analytics.unanswered_searches(session, WINDOW, "no_call")
    assert funnel == {
        "searches": 5,
        "searches_followed_by_call": 2,
        "conversion_rate": 0.4,
        "searches_without_result": 2,
        "calls": 11,
        "calls_from_search": 3,
        "calls_by_name": 8,
    }
    assert [(q["query"], q["count"], q["callers"]) for q in empty] == [("delete everything", 2, 1)]
    assert empty[0]["last_at"] == (T0 + timedelta(minutes=9)).isoformat()
    assert [(q["query"], q["count"]) for q in no_call] == [("delete everything", 2), ("list secrets", 1)]


async def test_tools_never_found(resources: Resources) -> None:
    async with resources.session() as session:
        never = await analytics.never_found(session, Scope())
        since_later = await analytics.never_found(session, Scope(since=T0 + timedelta(minutes=30)))
    # fs__write was never returned; old__gone is deprecated.
    assert [(t["tool"], t["server"], t["calls"], t["last_returned_at"]) for t in never] == [(WRITE, "fs", 0, None)]
    # Since 10:30 only secret__get (11:05) came back.
    assert [t["tool"] for t in since_later] == [FS, WRITE, GH]
    assert [t["calls"] for t in since_later] == [4, 0, 5]


async def test_empty_window(resources: Resources) -> None:
    scope = Scope(since=T0 + timedelta(days=30))
    async with resources.session() as session:
        assert await analytics.tool_usage(session, scope) == []
        assert await analytics.timeseries(session, scope) == []
        assert await analytics.top_callers(session, scope) == []
        assert await analytics.cooccurrence(session, scope) == []
        assert (await analytics.conversion(session, scope))["conversion_rate"] is None
        assert await analytics.tool_usage(session, Scope(tools=frozenset())) == []
