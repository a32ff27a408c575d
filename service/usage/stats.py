"""Usage statistics kept in SQL and refreshed incrementally from the logs.

`executions` feed `scope_tool_stats` (decayed calls, successes and failures, latency, per permission scope and
tool, each caller's part capped), `scope_caller_tool_stats` (each caller's own and capped part: usage/shares.py) and
`caller_tool_stats` (per-caller reuse) that ranking reads, `tool_stats` (the same over every scope, for
the analytics) and the analytics rollups (usage/rollups.py); `searches` feed `tool_search_stats` (how often each
tool came back) and the rollups.

Each log row is counted exactly once whatever its arrival time (a spill replay, a retry, a replica with a
skewed clock): a refresh reads rows whose `counted_at` is still empty and sets it in the transaction that
folds them. Rows that finished less than `refresh_lag_seconds` ago wait a little, so calls fold mostly in
order (pairs, decay); they are counted all the same when they arrive later. Consumers of one log take
turns: PostgreSQL locks the log's `stats_cursor` row (a replica that finds it locked skips the round), and
every consumer's marks and cursor update are conditional, so a transaction that raced another one (SQLite)
changes nothing and is rolled back."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, func, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.among import among
from service.db.models import (
    CallerToolStats,
    Execution,
    ScopeCallerToolStats,
    ScopeToolStats,
    Search,
    StatsCursor,
    ToolSearchStats,
    ToolStats,
    utcnow,
)
from service.settings import LearningSettings
from service.usage.decay import Decayed
from service.usage.decay import decay_factor as decay_factor
from service.usage.rollups import (
    FAILURE,
    IDS_PER_STATEMENT,
    IGNORED,
    REACHED_SERVER,
    SUCCESS,
    as_utc,
    fold_executions,
    fold_searches,
    upsert_replace,
)
from service.usage.shares import ShareRow, fold_share, load_share_rows

EXECUTIONS_CURSOR = "executions"
SEARCHES_CURSOR = "searches"
PAIRS_PER_QUERY = 500
# For ranking, arguments that do not fit are a failure too: the tool did not do the job it was chosen for
# (agents mostly get them wrong on tools surfaced for the wrong request).
LEARNED_FAILURE = FAILURE | {"invalid_arguments"}


@dataclass
class ToolRow:
    """A `tool_stats` row as plain data (folding thousands of calls through ORM objects is too slow)."""

    tool: str
    calls: int = 0
    successes: int = 0
    failures: int = 0
    decayed_calls: float = 0.0
    decayed_successes: float = 0.0
    decayed_failures: float = 0.0
    latency_ms_avg: float = 0.0
    last_called_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass
class ScopeToolRow(ToolRow):
    """A `scope_tool_stats` row: a ToolRow of the calls made in one permission scope."""

    scope: str = ""


@dataclass
class HabitRow:
    """A `caller_tool_stats` row as plain data."""

    caller: str
    tool: str
    calls: int = 0
    successes: int = 0
    decayed_calls: float = 0.0
    decayed_successes: float = 0.0
    last_called_at: datetime | None = None


@dataclass
class ConsumeReport:
    """What one refresh consumed and which statistics rows it changed."""

    executions: int = 0
    searches: int = 0
    scope_tools: list[ScopeToolRow] = field(default_factory=list)
    habits: list[HabitRow] = field(default_factory=list)
    shares: list[ShareRow] = field(default_factory=list)
    lost_race: bool = False


async def load_tool_rows(session: AsyncSession, names: Iterable[str] | None = None) -> list[ToolRow]:
    """tool_stats rows (of these tools, or all)."""
    table = ToolStats.__table__
    query = select(table) if names is None else select(table).where(among(table.c.tool, names))
    return [ToolRow(**row._mapping) for row in (await session.execute(query)).all()]


async def _rows_of_pairs(
    session: AsyncSession, table: Table, first: str, pairs: Iterable[tuple[str, str]] | None
) -> list[Any]:
    """Rows of a table keyed by (first, tool): of these pairs, or all."""
    if pairs is None:
        return list((await session.execute(select(table))).all())
    wanted = sorted(pairs)
    rows: list[Any] = []
    # PostgreSQL plans a row-value IN list as nested ORs: thousands of pairs overflow its stack.
    for start in range(0, len(wanted), PAIRS_PER_QUERY):
        chunk = wanted[start : start + PAIRS_PER_QUERY]
        query = select(table).where(tuple_(table.c[first], table.c.tool).in_(chunk))
        rows.extend((await session.execute(query)).all())
    return rows


async def load_scope_tool_rows(
    session: AsyncSession, pairs: Iterable[tuple[str, str]] | None = None
) -> list[ScopeToolRow]:
    """scope_tool_stats rows (of these (scope, tool) pairs, or all)."""
    rows = await _rows_of_pairs(session, ScopeToolStats.__table__, "scope", pairs)
    return [ScopeToolRow(**row._mapping) for row in rows]


async def load_habit_rows(session: AsyncSession, pairs: Iterable[tuple[str, str]] | None = None) -> list[HabitRow]:
    """caller_tool_stats rows (of these (caller, tool) pairs, or all)."""
    rows = await _rows_of_pairs(session, CallerToolStats.__table__, "caller", pairs)
    return [HabitRow(**row._mapping) for row in rows]


async def cursor_row(session: AsyncSession, name: str) -> StatsCursor | None:
    """The cursor of a log, locked for this transaction (created if missing); None while another
    transaction holds it (PostgreSQL: another replica is consuming this log)."""
    statement = select(StatsCursor).where(StatsCursor.name == name).with_for_update(skip_locked=True)
    row = (await session.scalars(statement)).first()
    if row is not None:
        return row
    if await session.scalar(select(func.count()).select_from(StatsCursor).where(StatsCursor.name == name)):
        return None
    row = StatsCursor(name=name, last_started_at=None, last_execution_id=None, rows_seen=0)
    session.add(row)
    await session.flush()
    return row


async def _mark_counted(session: AsyncSession, table: Table, ids: list[str]) -> bool:
    """Set `counted_at` on these rows; False if another consumer counted one of them first."""
    marked, now = 0, utcnow()
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        chunk = ids[start : start + IDS_PER_STATEMENT]
        result = await session.execute(
            update(table).where(table.c.id.in_(chunk), table.c.counted_at.is_(None)).values(counted_at=now)
        )
        marked += result.rowcount  # type: ignore[attr-defined]
    return marked == len(ids)


async def _advance(session: AsyncSession, cursor: StatsCursor, at: datetime, row_id: str, seen: int) -> bool:
    """Move the cursor, unless another process moved it since we read it."""
    result = await session.execute(
        update(StatsCursor)
        .where(StatsCursor.name == cursor.name, StatsCursor.rows_seen == cursor.rows_seen)
        .values(last_started_at=at, last_execution_id=row_id, rows_seen=cursor.rows_seen + seen)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


async def _settle(session: AsyncSession, table: Table, cursor: StatsCursor, rows: list[Any], at: datetime) -> bool:
    """Mark a consumed batch and move the cursor; False when another consumer got there first."""
    if not await _mark_counted(session, table, [r.id for r in rows]):
        return False
    return await _advance(session, cursor, at, rows[-1].id, len(rows))


def _fold_tool(tool: ToolRow, row: Any, settings: LearningSettings, weight: float = 1.0) -> None:
    """Count one call in a tool's (or a scope's tool's) statistics; its decayed values count it with `weight`."""
    at = as_utc(row.started_at)
    ok = row.status in SUCCESS
    failed = row.status in LEARNED_FAILURE
    tool.calls += 1
    tool.successes += int(ok)
    tool.failures += int(failed)
    decayed = Decayed(
        [tool.decayed_calls, tool.decayed_successes, tool.decayed_failures],
        as_utc(tool.last_called_at) if tool.last_called_at else None,
    )
    decayed.add(at, (weight, weight * ok, weight * failed), settings.half_life_days)
    tool.decayed_calls, tool.decayed_successes, tool.decayed_failures = decayed.values
    tool.last_called_at = decayed.ref
    if row.status in REACHED_SERVER:
        if tool.calls == 1 or tool.latency_ms_avg == 0.0:
            tool.latency_ms_avg = row.duration_ms
        else:
            tool.latency_ms_avg += settings.latency_smoothing * (row.duration_ms - tool.latency_ms_avg)


def _fold_habit(habit: HabitRow, row: Any, settings: LearningSettings) -> None:
    """Count one call in its caller's reuse of the tool."""
    at = as_utc(row.started_at)
    ok = row.status in SUCCESS
    habit.calls += 1
    habit.successes += int(ok)
    reuse = Decayed(
        [habit.decayed_calls, habit.decayed_successes],
        as_utc(habit.last_called_at) if habit.last_called_at else None,
    )
    reuse.add(at, (1.0, float(ok)), settings.half_life_days)
    habit.decayed_calls, habit.decayed_successes = reuse.values
    habit.last_called_at = reuse.ref


async def consume_executions(session: AsyncSession, settings: LearningSettings, report: ConsumeReport) -> bool:
    """Fold one batch of new executions into the statistics; False when there was nothing new.

    The caller commits (or rolls back when `report.lost_race`)."""
    cursor = await cursor_row(session, EXECUTIONS_CURSOR)
    if cursor is None:
        return False
    horizon = utcnow() - timedelta(seconds=settings.refresh_lag_seconds)
    e = Execution.__table__.c
    rows = (
        await session.execute(
            select(
                e.id,
                e.caller,
                e.tool,
                e.status,
                e.duration_ms,
                e.input_tokens,
                e.output_tokens,
                e.search_id,
                e.started_at,
                e.finished_at,
                e.scope,
            )
            .where(e.counted_at.is_(None), e.finished_at <= horizon)
            .order_by(e.finished_at, e.id)
            .limit(settings.refresh_batch)
        )
    ).all()
    if not rows:
        return False
    counted = [r for r in rows if r.status not in IGNORED]
    tools = {t.tool: t for t in await load_tool_rows(session, {r.tool for r in counted})} if counted else {}
    # Rows logged before 0009 have no scope: they count for the analytics, in no scope's ranking.
    in_scopes = {(r.scope, r.tool) for r in counted if r.scope is not None}
    scoped = {(t.scope, t.tool): t for t in await load_scope_tool_rows(session, in_scopes)} if in_scopes else {}
    in_shares = {(r.scope, r.caller, r.tool) for r in counted if r.scope is not None}
    shares = {(h.scope, h.caller, h.tool): h for h in await load_share_rows(session, in_shares)} if in_shares else {}
    pairs = {(r.caller, r.tool) for r in counted}
    habits = {(h.caller, h.tool): h for h in await load_habit_rows(session, pairs)} if counted else {}
    now = utcnow()
    for row in counted:
        tool = tools.get(row.tool) or tools.setdefault(row.tool, ToolRow(row.tool))
        _fold_tool(tool, row, settings)
        tool.updated_at = now
        if row.scope is not None:
            key = (row.scope, row.tool)
            in_scope = scoped.get(key) or scoped.setdefault(key, ScopeToolRow(row.tool, scope=row.scope))
            mine = (row.scope, row.caller, row.tool)
            share = shares.get(mine) or shares.setdefault(mine, ShareRow(*mine))
            _fold_tool(in_scope, row, settings, fold_share(share, row, row.status in LEARNED_FAILURE, settings))
            in_scope.updated_at = now
        habit = habits.get((row.caller, row.tool)) or habits.setdefault(
            (row.caller, row.tool), HabitRow(row.caller, row.tool)
        )
        _fold_habit(habit, row, settings)
    await upsert_replace(session, ToolStats.__table__, ["tool"], [dict(vars(t)) for t in tools.values()])
    await upsert_replace(session, ScopeToolStats.__table__, ["scope", "tool"], [dict(vars(t)) for t in scoped.values()])
    await upsert_replace(
        session, ScopeCallerToolStats.__table__, ["scope", "caller", "tool"], [dict(vars(h)) for h in shares.values()]
    )
    await upsert_replace(
        session, CallerToolStats.__table__, ["caller", "tool"], [dict(vars(h)) for h in habits.values()]
    )
    await fold_executions(session, rows, settings)
    if not await _settle(session, Execution.__table__, cursor, rows, as_utc(rows[-1].finished_at)):
        report.lost_race = True
        return False
    report.executions += len(rows)
    report.scope_tools.extend(scoped.values())
    report.habits.extend(habits.values())
    report.shares.extend(shares.values())
    return len(rows) == settings.refresh_batch


async def consume_searches(session: AsyncSession, settings: LearningSettings, report: ConsumeReport) -> bool:
    """Fold one batch of new searches into `tool_search_stats`; False when there was nothing more."""
    cursor = await cursor_row(session, SEARCHES_CURSOR)
    if cursor is None:
        return False
    horizon = utcnow() - timedelta(seconds=settings.refresh_lag_seconds)
    rows = (
        await session.execute(
            select(Search.id, Search.created_at, Search.results, Search.caller, Search.result_count)
            .where(Search.counted_at.is_(None), Search.created_at <= horizon)
            .order_by(Search.created_at, Search.id)
            .limit(settings.refresh_batch)
        )
    ).all()
    if not rows:
        return False
    appearances: dict[str, int] = defaultdict(int)
    top1: dict[str, int] = defaultdict(int)
    last_at: dict[str, datetime] = {}
    for _id, created_at, results, _caller, _count in rows:
        for rank, item in enumerate(results or []):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            appearances[name] += 1
            top1[name] += int(rank == 0)
            at = as_utc(created_at)
            if name not in last_at or at > last_at[name]:
                last_at[name] = at
    existing = (
        {
            s.tool: s
            for s in (
                await session.scalars(select(ToolSearchStats).where(among(ToolSearchStats.tool, appearances)))
            ).all()
        }
        if appearances
        else {}
    )
    for name, count in appearances.items():
        stats = existing.get(name)
        if stats is None:
            stats = ToolSearchStats(tool=name, appearances=0, top1=0, last_returned_at=None)
            session.add(stats)
        stats.appearances += count
        stats.top1 += top1[name]
        previous = as_utc(stats.last_returned_at) if stats.last_returned_at else None
        stats.last_returned_at = last_at[name] if previous is None or last_at[name] > previous else previous
    await fold_searches(session, [(id_, caller, created_at, count) for id_, created_at, _r, caller, count in rows])
    if not await _settle(session, Search.__table__, cursor, list(rows), as_utc(rows[-1].created_at)):
        report.lost_race = True
        return False
    report.searches += len(rows)
    return len(rows) == settings.refresh_batch
