"""Learning from use: bounded boosts, a failing tool sinks, a caller's habit rises, no history no boost,
and the incremental refresh of the statistics from the execution log."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import select

from indexer.embedding import HashingEmbedder
from service.db.engine import create_engine_for, create_sessionmaker, sync_url, upgrade_database
from service.db.models import (
    CallerToolStats,
    Execution,
    ScopeToolStats,
    Search,
    StatsCursor,
    ToolSearchStats,
    ToolStats,
)
from service.resources import Resources, build_resources
from service.search.ranking import Candidate, apply_boosts, rank
from service.settings import LearningSettings, Settings
from service.usage.learning import (
    Snapshot,
    ToolHistory,
    boosts_for,
    compute_boosts,
    habit_boost,
    learning_state,
    popularity_boost,
    refresh_stats,
    reliability_penalty,
)
from service.usage.shares import ShareRow, fold_share, shared_weight
from service.usage.stats import Decayed, decay_factor

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SETTINGS = LearningSettings()


def history(calls: float, successes: float, failures: float, at: datetime = NOW) -> Decayed:
    return Decayed([calls, successes, failures], at)


def test_each_boost_is_bounded_and_saturates() -> None:
    for n in (0.5, 1, 10, 1e3, 1e9):
        assert 0 < popularity_boost(n, SETTINGS) < SETTINGS.max_popularity_boost
        assert 0 < habit_boost(n, SETTINGS) < SETTINGS.max_caller_boost
        if n >= 1:
            assert -SETTINGS.max_reliability_penalty <= reliability_penalty(0, n, SETTINGS) < 0
    assert popularity_boost(20, SETTINGS) == pytest.approx(SETTINGS.max_popularity_boost / 2)
    assert habit_boost(3, SETTINGS) == pytest.approx(SETTINGS.max_caller_boost / 2)
    assert popularity_boost(0, SETTINGS) == habit_boost(0, SETTINGS) == 0.0
    # All failures, many calls: close to the full penalty; the prior keeps one failure mild.
    assert reliability_penalty(0, 1e6, SETTINGS) == pytest.approx(-SETTINGS.max_reliability_penalty, rel=1e-3)
    assert reliability_penalty(0, 1, SETTINGS) == pytest.approx(
        -SETTINGS.max_reliability_penalty * ((1.25 / 6) - 0.2) / 0.8
    )
    # A reliable tool, one failing within the tolerance, or a single decayed failure, pays nothing.
    assert reliability_penalty(0, 0.5, SETTINGS) == 0.0
    assert reliability_penalty(1000, 0, SETTINGS) == 0.0
    assert reliability_penalty(95, 5, SETTINGS) == 0.0


def test_no_history_gets_no_boost_and_the_best_text_match_stays_first() -> None:
    snapshot = Snapshot()
    snapshot.scopes["dev"]["busy"] = ToolHistory(history(1e6, 1e6, 0), 5.0)
    snapshot.habits["alice"]["busy"] = Decayed([1e6, 1e6], NOW)
    boosts = compute_boosts(snapshot, "alice", "dev", ["new", "busy"], SETTINGS, NOW)
    assert boosts["new"] == {}
    assert set(boosts["busy"]) == {"popularity", "caller_habit"}
    total = sum(boosts["busy"].values())
    assert total < SETTINGS.max_popularity_boost + SETTINGS.max_caller_boost
    # The new tool leads the text match by more than the largest possible boost: it stays first.
    lead = SETTINGS.max_popularity_boost + SETTINGS.max_caller_boost + 0.01
    candidates = {"new": Candidate("new", 1.0), "busy": Candidate("busy", 1.0 - lead)}
    apply_boosts(candidates, boosts)
    assert [c.name for c in rank(candidates, [], 2)] == ["new", "busy"]
    assert candidates["new"].boosts == {} and candidates["new"].score == 1.0


def test_a_tool_that_keeps_failing_sinks_below_a_close_competitor() -> None:
    snapshot = Snapshot()
    snapshot.scopes["dev"]["flaky"] = ToolHistory(history(40, 4, 36), 900.0)
    snapshot.scopes["dev"]["steady"] = ToolHistory(history(40, 40, 0), 50.0)
    boosts = compute_boosts(snapshot, "bob", "dev", ["flaky", "steady"], SETTINGS, NOW)
    assert boosts["flaky"]["reliability"] == pytest.approx(reliability_penalty(4, 36, SETTINGS), abs=1e-6)
    assert boosts["flaky"]["reliability"] < -0.07
    assert "reliability" not in boosts["steady"]
    candidates = {"flaky": Candidate("flaky", 1.00), "steady": Candidate("steady", 0.95)}
    apply_boosts(candidates, boosts)
    assert [c.name for c in rank(candidates, [], 2)] == ["steady", "flaky"]


def test_a_callers_habit_rises_for_that_caller_only() -> None:
    snapshot = Snapshot()
    snapshot.habits["alice"]["mine"] = Decayed([12, 12], NOW)
    alice = compute_boosts(snapshot, "alice", "dev", ["mine", "other"], SETTINGS, NOW)
    bob = compute_boosts(snapshot, "bob", "dev", ["mine", "other"], SETTINGS, NOW)
    assert alice["mine"] == {"caller_habit": pytest.approx(SETTINGS.max_caller_boost * 12 / 15, abs=1e-6)}
    assert alice["other"] == {} and bob["mine"] == {} and bob["other"] == {}
    candidates = {"other": Candidate("other", 0.50), "mine": Candidate("mine", 0.47)}
    apply_boosts(candidates, alice)
    assert [c.name for c in rank(candidates, [], 2)] == ["mine", "other"]


def test_history_decays_with_the_half_life() -> None:
    snapshot = Snapshot()
    snapshot.habits["alice"]["old"] = Decayed([8, 8], NOW - timedelta(days=SETTINGS.half_life_days))
    boosts = compute_boosts(snapshot, "alice", "dev", ["old"], SETTINGS, NOW)
    assert boosts["old"]["caller_habit"] == pytest.approx(habit_boost(4, SETTINGS), abs=1e-6)
    assert decay_factor(14 * 86400, 14) == pytest.approx(0.5)
    decayed = Decayed([0.0], None)
    decayed.add(NOW, [1.0], 14)
    decayed.add(NOW - timedelta(days=14), [1.0], 14)  # out of order: counts half
    assert decayed.values == [pytest.approx(1.5)] and decayed.ref == NOW
    decayed.add(NOW + timedelta(days=14), [1.0], 14)
    assert decayed.values == [pytest.approx(1.75)] and decayed.ref == NOW + timedelta(days=14)


def test_popularity_and_reliability_are_read_in_the_callers_scope_only() -> None:
    snapshot = Snapshot()
    snapshot.scopes["admin"]["shared"] = ToolHistory(history(30, 0, 30), 10.0)
    snapshot.habits["alice"]["shared"] = Decayed([5, 5], NOW)
    admin = compute_boosts(snapshot, "root", "admin", ["shared"], SETTINGS, NOW)["shared"]
    assert admin["reliability"] < -0.5 and admin["popularity"] > 0.02 and "caller_habit" not in admin
    # Another scope, or none, reads nothing of the admin's calls; the caller's own habit stays its own.
    assert compute_boosts(snapshot, "bob", "dev", ["shared"], SETTINGS, NOW) == {"shared": {}}
    assert compute_boosts(snapshot, "bob", "admin,dev", ["shared"], SETTINGS, NOW) == {"shared": {}}
    assert set(compute_boosts(snapshot, "alice", None, ["shared"], SETTINGS, NOW)["shared"]) == {"caller_habit"}


# --- the incremental refresh against a real SQLite database -------------------------------------------


@pytest.fixture
async def resources(tmp_path: Path) -> AsyncIterator[Resources]:
    settings = Settings(data_dir=tmp_path)
    settings.learning.refresh_lag_seconds = 0.0
    res = build_resources(settings, HashingEmbedder())
    upgrade_database(settings.database_url)
    res.engine = create_engine_for(settings.database_url)
    res.sessionmaker = create_sessionmaker(res.engine)
    yield res
    await res.engine.dispose()


def execution(
    tool: str,
    status: str = "ok",
    caller: str = "alice",
    at: datetime | None = None,
    scope: str | None = "dev",
    duration_ms: float = 100.0,
    **extra: object,
) -> Execution:
    at = at or datetime.now(UTC) - timedelta(minutes=5)
    return Execution(
        id=str(uuid.uuid4()),
        caller=caller,
        tool=tool,
        server_id=tool.split("__")[0],
        arguments_digest="0" * 64,
        status=status,
        duration_ms=duration_ms,
        started_at=at,
        finished_at=at + timedelta(milliseconds=duration_ms),
        scope=scope,
        **extra,
    )


async def add(resources: Resources, *rows: object) -> None:
    async with resources.session() as session:
        session.add_all(rows)
        await session.commit()


async def test_refresh_consumes_only_new_executions(resources: Resources) -> None:
    start = datetime.now(UTC) - timedelta(hours=1)
    rows = [execution("a__x", at=start + timedelta(seconds=i), duration_ms=100 + i) for i in range(6)]
    rows += [
        execution("a__x", "tool_error", at=start + timedelta(seconds=10), duration_ms=50),
        execution("a__x", "invalid_arguments", at=start + timedelta(seconds=11)),
        execution("a__x", "denied", caller="mallory", at=start + timedelta(seconds=12)),
        execution("b__y", "timeout", caller="bob", at=start + timedelta(seconds=13), duration_ms=30_000),
    ]
    await add(resources, *rows)
    assert await refresh_stats(resources) == 10
    assert await refresh_stats(resources) == 0  # nothing new: nothing consumed
    async with resources.session() as session:
        a = await session.get(ToolStats, "a__x")
        b = await session.get(ToolStats, "b__y")
        habits = {(h.caller, h.tool): h for h in (await session.scalars(select(CallerToolStats))).all()}
        cursor = await session.get(StatsCursor, "executions")
    assert a is not None and b is not None and cursor is not None
    # The denied call says nothing about the tool; for ranking, invalid arguments are a failure too.
    assert (a.calls, a.successes, a.failures) == (8, 6, 2)
    assert (b.calls, b.successes, b.failures) == (1, 0, 1)
    assert a.decayed_calls == pytest.approx(8, rel=1e-4)
    assert a.decayed_successes == pytest.approx(6, rel=1e-4) and a.decayed_failures == pytest.approx(2, rel=1e-4)
    # Latency: the first call, then a moving average with weight 0.1 over the calls that reached the server.
    expected = 100.0
    for duration in (101, 102, 103, 104, 105, 50):
        expected += 0.1 * (duration - expected)
    assert a.latency_ms_avg == pytest.approx(expected)
    assert set(habits) == {("alice", "a__x"), ("bob", "b__y")}
    assert habits[("alice", "a__x")].calls == 8 and habits[("alice", "a__x")].successes == 6
    assert habits[("alice", "a__x")].decayed_successes == pytest.approx(6, rel=1e-4)
    assert cursor.rows_seen == 10
    # New rows are folded in on top of the old ones, and the in-memory snapshot follows.
    await add(resources, *[execution("a__x", "tool_error") for _ in range(30)])
    assert await refresh_stats(resources) == 30
    async with resources.session() as session:
        a = await session.get(ToolStats, "a__x")
    assert a is not None and (a.calls, a.failures) == (38, 32)
    boosts = boosts_for(resources, "alice", "dev", ["a__x", "b__y", "c__z"])
    assert boosts["a__x"]["reliability"] < -0.05 and boosts["a__x"]["caller_habit"] > 0
    assert "caller_habit" not in boosts["b__y"] and boosts["c__z"] == {}
    assert learning_state(resources).snapshot.rows_seen == 40


async def test_rows_finished_within_the_lag_wait_and_batches_continue(resources: Resources) -> None:
    resources.settings.learning.refresh_lag_seconds = 60.0
    resources.settings.learning.refresh_batch = 7
    await add(resources, *[execution("a__x") for _ in range(20)])
    await add(resources, execution("a__x", at=datetime.now(UTC) - timedelta(seconds=1)))  # finished just now
    assert await refresh_stats(resources) == 20
    resources.settings.learning.refresh_lag_seconds = 0.0
    assert await refresh_stats(resources) == 1


async def test_a_second_process_reads_what_the_first_consumed(resources: Resources, tmp_path: Path) -> None:
    await add(resources, *[execution("a__x", caller="alice") for _ in range(5)])
    assert await refresh_stats(resources) == 5
    other = build_resources(resources.settings, HashingEmbedder())
    other.engine = create_engine_for(resources.settings.database_url)
    other.sessionmaker = create_sessionmaker(other.engine)
    try:
        assert await refresh_stats(other) == 0  # already consumed by the first "replica"
        assert boosts_for(other, "alice", "dev", ["a__x"]) == boosts_for(resources, "alice", "dev", ["a__x"])
        assert set(boosts_for(other, "alice", "dev", ["a__x"])["a__x"]) == {"popularity", "caller_habit"}
    finally:
        await other.engine.dispose()
    async with resources.session() as session:
        assert (await session.get(ToolStats, "a__x")).calls == 5  # type: ignore[union-attr]


def migrated_resources(tmp_path: Path, database_url: str) -> Resources:
    """Resources on a migrated SQLite or PostgreSQL database; statistics fold calls at once."""
    settings = Settings(data_dir=tmp_path)
    settings.db.url = database_url
    settings.learning.refresh_lag_seconds = 0.0
    resources = build_resources(settings, HashingEmbedder())
    upgrade_database(settings.database_url)
    resources.engine = create_engine_for(settings.database_url)
    resources.sessionmaker = create_sessionmaker(resources.engine)
    return resources


@pytest.fixture
async def shared_db(tmp_path: Path, database_url: str) -> AsyncIterator[Resources]:
    """Resources on a migrated SQLite or PostgreSQL database."""
    res = migrated_resources(tmp_path, database_url)
    yield res
    await res.engine.dispose()


async def test_each_scope_learns_its_own_calls_and_a_replica_reads_them(shared_db: Resources) -> None:
    resources = shared_db
    await add(resources, *[execution("a__x", "tool_error", caller="root", scope="admin") for _ in range(30)])
    await add(resources, *[execution("a__x", caller=caller, scope="dev") for caller in ("alice", "bob") * 5])
    await add(resources, *[execution("a__x", "tool_error", caller="old", scope=None) for _ in range(7)])
    assert await refresh_stats(resources) == 47
    async with resources.session() as session:
        scoped = {(s.scope, s.tool): s for s in (await session.scalars(select(ScopeToolStats))).all()}
        every = await session.get(ToolStats, "a__x")
    # Rows logged before 0009 (no scope) count for the analytics only.
    assert {k: (s.calls, s.successes, s.failures) for k, s in scoped.items()} == {
        ("admin", "a__x"): (30, 0, 30),
        ("dev", "a__x"): (10, 10, 0),
    }
    assert every is not None and (every.calls, every.failures) == (47, 37)
    admin = boosts_for(resources, "root", "admin", ["a__x"])["a__x"]
    dev = boosts_for(resources, "alice", "dev", ["a__x"])["a__x"]
    assert admin["reliability"] < -0.5 and "reliability" not in dev
    # alice's own 5 calls count in full for her, bob's 5 only up to shared_calls_per_caller (2).
    assert dev["popularity"] == pytest.approx(SETTINGS.max_popularity_boost * 7 / 27, abs=1e-4)
    # bob shares alice's scope the same way: the same popularity (and his own habit).
    assert boosts_for(resources, "bob", "dev", ["a__x"])["a__x"]["popularity"] == dev["popularity"]
    assert boosts_for(resources, "carol", "ops", ["a__x"]) == {"a__x": {}}  # a scope without calls reads none
    other = build_resources(resources.settings, HashingEmbedder())
    other.engine = create_engine_for(resources.settings.database_url)
    other.sessionmaker = create_sessionmaker(other.engine)
    try:
        await add(resources, *[execution("a__x", "tool_error", caller="root", scope="admin") for _ in range(5)])
        assert await refresh_stats(other) == 5  # the other replica folds these on top of the stored scopes
        assert boosts_for(other, "alice", "dev", ["a__x"]) == boosts_for(resources, "alice", "dev", ["a__x"])
        assert await refresh_stats(resources) == 0  # and the first one reloads what the other one wrote
        snapshot = learning_state(resources).snapshot
        assert snapshot.shares["admin"][("root", "a__x")].values[0] == pytest.approx(35)  # root's own calls
        assert snapshot.scopes["admin"]["a__x"].decayed.values[0] == pytest.approx(2)  # what others count of them
        assert boosts_for(resources, "root", "admin", ["a__x"]) == boosts_for(other, "root", "admin", ["a__x"])
    finally:
        await other.engine.dispose()


async def test_calls_logged_before_0009_count_in_no_scope(tmp_path: Path, database_url: str) -> None:
    """Upgrading: the old rows keep their place in tool_stats (analytics) and move no scope's boosts; the
    boosts start again from the first calls logged with a scope."""
    upgrade_database(database_url, "0008")
    old = execution("a__x", "tool_error", caller="root", scope=None)
    row = {c: getattr(old, c) for c in ("id", "caller", "tool", "server_id", "arguments_digest", "status")}
    engine = sa.create_engine(sync_url(database_url))
    with engine.begin() as connection:
        for i in range(20):  # not counted yet when the service stopped
            values = {**row, "id": f"old-{i}", "at": old.started_at}
            connection.execute(
                sa.text(
                    "INSERT INTO executions (id, caller, tool, server_id, arguments_digest, status, duration_ms, "
                    "input_tokens, output_tokens, started_at, finished_at) VALUES (:id, :caller, :tool, "
                    ":server_id, :arguments_digest, :status, 10, 0, 0, :at, :at)"
                ),
                values,
            )
    engine.dispose()
    resources = migrated_resources(tmp_path, database_url)
    try:
        assert await refresh_stats(resources) == 20
        async with resources.session() as session:
            assert (await session.get(ToolStats, "a__x")).failures == 20  # type: ignore[union-attr]
            assert (await session.scalars(select(ScopeToolStats))).all() == []
            assert set((await session.scalars(select(Execution.scope))).all()) == {None}
        assert boosts_for(resources, "root", "admin", ["a__x"]) == {"a__x": {}}
        await add(resources, *[execution("a__x", caller="root", scope="admin") for _ in range(3)])
        assert await refresh_stats(resources) == 3
        assert set(boosts_for(resources, "root", "admin", ["a__x"])["a__x"]) == {"popularity", "caller_habit"}
    finally:
        await resources.engine.dispose()


async def test_search_log_feeds_tool_search_stats(resources: Resources) -> None:
    at = datetime.now(UTC) - timedelta(minutes=1)
    searches = [
        Search(
            id=str(uuid.uuid4()),
            caller="alice",
            query="q1",
            k=2,
            created_at=at,
            results=[{"name": "a__x", "score": 1.0}, {"name": "b__y", "score": 0.5}],
            result_count=2,
        ),
        Search(
            id=str(uuid.uuid4()),
            caller="bob",
            query="q2",
            k=2,
            created_at=at + timedelta(seconds=1),
            results=[{"name": "b__y", "score": 0.9}],
            result_count=1,
        ),
        Search(
            id=str(uuid.uuid4()),
            caller="bob",
            query="q3",
            k=2,
            created_at=at + timedelta(seconds=2),
            results=[],
            result_count=0,
        ),
    ]
    await add(resources, *searches)
    await refresh_stats(resources)
    await refresh_stats(resources)
    async with resources.session() as session:
        stats = {s.tool: s for s in (await session.scalars(select(ToolSearchStats))).all()}
    assert {name: (s.appearances, s.top1) for name, s in stats.items()} == {"a__x": (1, 1), "b__y": (2, 1)}
    assert stats["b__y"].last_returned_at.replace(tzinfo=UTC) == (at + timedelta(seconds=1))  # type: ignore[union-attr]


async def test_learning_can_be_switched_off(resources: Resources) -> None:
    await add(resources, *[execution("a__x") for _ in range(5)])
    await refresh_stats(resources)
    resources.settings.learning.enabled = False
    assert boosts_for(resources, "alice", "dev", ["a__x"]) == {"a__x": {}}


def test_a_callers_part_in_its_scope_is_capped_and_its_own_view_is_whole() -> None:
    """40 failing calls by one caller: the scope counts 2 of them for the others, all 40 for the caller."""
    share, scoped = ShareRow("dev", "mallory", "t"), Decayed([0.0, 0.0, 0.0], None)
    for i in range(40):
        row = execution("t", "tool_error", caller="mallory", scope="dev", at=NOW + timedelta(seconds=i))
        weight = fold_share(share, row, True, SETTINGS)
        scoped.add(NOW + timedelta(seconds=i), (weight, 0.0, weight), SETTINGS.half_life_days)
    cap = SETTINGS.shared_calls_per_caller
    assert scoped.values == [pytest.approx(cap, abs=1e-3), 0.0, pytest.approx(cap, abs=1e-3)]
    assert share.values[:3] == [pytest.approx(40, abs=1e-3), 0.0, pytest.approx(40, abs=1e-3)]
    snapshot = Snapshot()
    snapshot.scopes["dev"]["t"] = ToolHistory(scoped)
    snapshot.put_share(share)
    bob = compute_boosts(snapshot, "bob", "dev", ["t"], SETTINGS, NOW + timedelta(seconds=40))["t"]
    mallory = compute_boosts(snapshot, "mallory", "dev", ["t"], SETTINGS, NOW + timedelta(seconds=40))["t"]
    assert bob["reliability"] == pytest.approx(reliability_penalty(0, cap, SETTINGS), abs=1e-3)
    assert mallory["reliability"] == pytest.approx(reliability_penalty(0, 40, SETTINGS), abs=1e-3)
    assert bob["reliability"] > -0.16 and mallory["reliability"] < -0.8
    assert shared_weight(0.0, "invalid_arguments", SETTINGS.model_copy(update={"share_invalid_arguments": False})) == 0
