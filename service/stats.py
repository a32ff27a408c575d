"""Usage statistics kept in SQL and refreshed incrementally from the logs.

`executions` feed `tool_stats` (decayed calls, successes and failures, latency) and `caller_tool_stats`
(per-caller reuse); `searches` feed `tool_search_stats` (how often each tool came back). Each log has a
cursor row in `stats_cursor` at the last consumed (timestamp, id); rows that finished less than
`refresh_lag_seconds` ago wait for the next refresh, because concurrent requests commit out of order.
The cursor update is conditional on the row count it started from, so two replicas never both consume
the same rows."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import CallerToolStats, Execution, Search, StatsCursor, ToolSearchStats, ToolStats, utcnow
from service.settings import LearningSettings

EXECUTIONS_CURSOR = "executions"
SEARCHES_CURSOR = "searches"
SUCCESS = frozenset({"ok"})
FAILURE = frozenset({"tool_error", "timeout", "upstream_error"})
# Calls that say nothing about the tool: refused by policy, unknown name, caller gone, our own failure.
IGNORED = frozenset({"denied", "not_found", "cancelled", "internal_error"})
# Calls that reached the upstream server; their duration is the tool's latency.
REACHED_SERVER = SUCCESS | FAILURE


def as_utc(moment: datetime) -> datetime:
    """SQLite hands timestamps back naive; they were written in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def decay_factor(elapsed_seconds: float, half_life_days: float) -> float:
    """2^(-elapsed / half-life); 1 for a non-positive elapsed time."""
    if elapsed_seconds <= 0:
        return 1.0
    return math.pow(2.0, -elapsed_seconds / (half_life_days * 86400.0))


@dataclass
class Decayed:
    """Values that all decay with the same half-life, stored as of `ref` (the latest event time)."""

    values: list[float]
    ref: datetime | None = None

    def add(self, at: datetime, weights: Iterable[float], half_life_days: float) -> None:
        """Count an event of time `at` (events may arrive slightly out of order)."""
        weights = list(weights)
        if self.ref is None:
            self.values, self.ref = [v + w for v, w in zip(self.values, weights, strict=True)], at
        elif at >= self.ref:
            factor = decay_factor((at - self.ref).total_seconds(), half_life_days)
            self.values = [v * factor + w for v, w in zip(self.values, weights, strict=True)]
            self.ref = at
        else:
            factor = decay_factor((self.ref - at).total_seconds(), half_life_days)
            self.values = [v + w * factor for v, w in zip(self.values, weights, strict=True)]

    def at(self, now: datetime, half_life_days: float) -> list[float]:
        """The values decayed to `now`."""
        if self.ref is None:
            return [0.0 for _ in self.values]
        factor = decay_factor((now - self.ref).total_seconds(), half_life_days)
        return [v * factor for v in self.values]


@dataclass
class ConsumeReport:
    """What one refresh consumed and which statistics rows it changed."""

    executions: int = 0
    searches: int = 0
    tools: list[ToolStats] = field(default_factory=list)
    habits: list[CallerToolStats] = field(default_factory=list)
    lost_race: bool = False


async def cursor_row(session: AsyncSession, name: str) -> StatsCursor:
    """The cursor of a log, created at the start of the log if missing."""
    row = await session.get(StatsCursor, name)
    if row is None:
        row = StatsCursor(name=name, last_started_at=None, last_execution_id=None, rows_seen=0)
        session.add(row)
        await session.flush()
    return row


def _after(column_at: Any, column_id: Any, cursor: StatsCursor) -> Any:
    if cursor.last_started_at is None:
        return True
    return or_(column_at > cursor.last_started_at,
               and_(column_at == cursor.last_started_at, column_id > (cursor.last_execution_id or "")))


async def _advance(session: AsyncSession, cursor: StatsCursor, at: datetime, row_id: str, seen: int) -> bool:
    """Move the cursor, unless another process moved it since we read it."""
    result = await session.execute(
        update(StatsCursor)
        .where(StatsCursor.name == cursor.name, StatsCursor.rows_seen == cursor.rows_seen)
        .values(last_started_at=at, last_execution_id=row_id, rows_seen=cursor.rows_seen + seen)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def _apply_execution(
    tool: ToolStats, habit: CallerToolStats, row: Execution, settings: LearningSettings
) -> None:
    at = as_utc(row.started_at)
    ok = row.status in SUCCESS
    failed = row.status in FAILURE
    tool.calls += 1
    tool.successes += int(ok)
    tool.failures += int(failed)
    decayed = Decayed([tool.decayed_calls, tool.decayed_successes, tool.decayed_failures],
                      as_utc(tool.last_called_at) if tool.last_called_at else None)
    decayed.add(at, (1.0, float(ok), float(failed)), settings.half_life_days)
    tool.decayed_calls, tool.decayed_successes, tool.decayed_failures = decayed.values
    tool.last_called_at = decayed.ref
    if row.status in REACHED_SERVER:
        if tool.calls == 1 or tool.latency_ms_avg == 0.0:
            tool.latency_ms_avg = row.duration_ms
        else:
            tool.latency_ms_avg += settings.latency_smoothing * (row.duration_ms - tool.latency_ms_avg)
    habit.calls += 1
    habit.successes += int(ok)
    reuse = Decayed([habit.decayed_calls, habit.decayed_successes],
                    as_utc(habit.last_called_at) if habit.last_called_at else None)
    reuse.add(at, (1.0, float(ok)), settings.half_life_days)
    habit.decayed_calls, habit.decayed_successes = reuse.values
    habit.last_called_at = reuse.ref


async def consume_executions(session: AsyncSession, settings: LearningSettings, report: ConsumeReport) -> bool:
    """Fold one batch of new executions into the statistics; False when there was nothing new.

    The caller commits (or rolls back when `report.lost_race`)."""
    cursor = await cursor_row(session, EXECUTIONS_CURSOR)
    horizon = utcnow() - timedelta(seconds=settings.refresh_lag_seconds)
    rows = (await session.scalars(
        select(Execution)
        .where(_after(Execution.finished_at, Execution.id, cursor), Execution.finished_at <= horizon)
        .order_by(Execution.finished_at, Execution.id)
        .limit(settings.refresh_batch)
    )).all()
    if not rows:
        return False
    counted = [r for r in rows if r.status not in IGNORED]
    tool_names = sorted({r.tool for r in counted})
    callers = sorted({r.caller for r in counted})
    tools = {t.tool: t for t in (await session.scalars(
        select(ToolStats).where(ToolStats.tool.in_(tool_names)))).all()} if tool_names else {}
    habits = {(h.caller, h.tool): h for h in (await session.scalars(
        select(CallerToolStats).where(CallerToolStats.caller.in_(callers), CallerToolStats.tool.in_(tool_names))
    )).all()} if counted else {}
    now = utcnow()
    for row in counted:
        tool = tools.get(row.tool)
        if tool is None:
            tool = tools[row.tool] = ToolStats(
                tool=row.tool, calls=0, successes=0, failures=0, decayed_calls=0.0, decayed_successes=0.0,
                decayed_failures=0.0, latency_ms_avg=0.0, last_called_at=None, updated_at=now,
            )
            session.add(tool)
        habit = habits.get((row.caller, row.tool))
        if habit is None:
            habit = habits[(row.caller, row.tool)] = CallerToolStats(
                caller=row.caller, tool=row.tool, calls=0, successes=0, decayed_calls=0.0,
                decayed_successes=0.0, last_called_at=None,
            )
            session.add(habit)
        _apply_execution(tool, habit, row, settings)
        tool.updated_at = now
    last = rows[-1]
    if not await _advance(session, cursor, as_utc(last.finished_at), last.id, len(rows)):
        report.lost_race = True
        return False
    report.executions += len(rows)
    touched_tools = {r.tool for r in counted}
    touched_habits = {(r.caller, r.tool) for r in counted}
    report.tools.extend(tools[t] for t in touched_tools)
    report.habits.extend(habits[h] for h in touched_habits)
    return len(rows) == settings.refresh_batch


async def consume_searches(session: AsyncSession, settings: LearningSettings, report: ConsumeReport) -> bool:
    """Fold one batch of new searches into `tool_search_stats`; False when there was nothing more."""
    cursor = await cursor_row(session, SEARCHES_CURSOR)
    horizon = utcnow() - timedelta(seconds=settings.refresh_lag_seconds)
    rows = (await session.execute(
        select(Search.id, Search.created_at, Search.results)
        .where(_after(Search.created_at, Search.id, cursor), Search.created_at <= horizon)
        .order_by(Search.created_at, Search.id)
        .limit(settings.refresh_batch)
    )).all()
    if not rows:
        return False
    appearances: dict[str, int] = defaultdict(int)
    top1: dict[str, int] = defaultdict(int)
    last_at: dict[str, datetime] = {}
    for _id, created_at, results in rows:
        for rank, item in enumerate(results or []):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            appearances[name] += 1
            top1[name] += int(rank == 0)
            at = as_utc(created_at)
            if name not in last_at or at > last_at[name]:
                last_at[name] = at
    existing = {s.tool: s for s in (await session.scalars(
        select(ToolSearchStats).where(ToolSearchStats.tool.in_(sorted(appearances))))).all()} if appearances else {}
    for name, count in appearances.items():
        stats = existing.get(name)
        if stats is None:
            stats = ToolSearchStats(tool=name, appearances=0, top1=0, last_returned_at=None)
            session.add(stats)
        stats.appearances += count
        stats.top1 += top1[name]
        previous = as_utc(stats.last_returned_at) if stats.last_returned_at else None
        stats.last_returned_at = last_at[name] if previous is None or last_at[name] > previous else previous
    _id, created_at, _results = rows[-1]
    if not await _advance(session, cursor, as_utc(created_at), rows[-1][0], len(rows)):
        report.lost_race = True
        return False
    report.searches += len(rows)
    return len(rows) == settings.refresh_batch
