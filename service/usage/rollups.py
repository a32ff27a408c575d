"""The rollups analytics read, folded from each batch of the execution and search logs.

`usage_daily` (day, caller, tool) holds counts, latency sums, maximum and a log histogram of durations;
`usage_hourly` (hour, caller) calls and searches; `usage_errors_daily` failed calls by status
(the execution log's: tool_error, invalid_arguments, timeout ...);
`tool_pairs_daily` two tools called one right after the other. Counters are added with one upsert per table
and batch (INSERT ... ON CONFLICT DO UPDATE, which SQLite and PostgreSQL share), in the transaction that
moves the log cursor, so each row is counted exactly once."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Integer, Table, case, exists, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import Execution, Search, as_utc, utcnow
from service.db.rollup_tables import (
    LATENCY_BUCKETS,
    caller_last_call,
    tool_pairs_daily,
    usage_daily,
    usage_errors_daily,
    usage_hourly,
)
from service.settings import LearningSettings

SUCCESS = frozenset({"ok"})
FAILURE = frozenset({"tool_error", "timeout", "upstream_error"})
# Calls that reached the upstream server; their duration is the tool's latency.
REACHED_SERVER = SUCCESS | FAILURE
# Calls that say nothing about the tool: refused by policy, unknown name, caller gone, our own failure.
IGNORED = frozenset({"denied", "not_found", "cancelled", "internal_error"})
HISTOGRAM = [f"h{i:02d}" for i in range(LATENCY_BUCKETS)]
searches = Search.__table__
executions = Execution.__table__
IDS_PER_STATEMENT = 5000  # bound parameters per statement stay far below SQLite's and PostgreSQL's limits

Key = tuple[Any, ...]


def day_of(moment: datetime) -> datetime:
    return as_utc(moment).replace(hour=0, minute=0, second=0, microsecond=0)


def hour_of(moment: datetime) -> datetime:
    return as_utc(moment).replace(minute=0, second=0, microsecond=0)


def latency_bucket(duration_ms: float) -> int:
    """0 under 1 ms, else k with 2^((k-1)/2) <= d < 2^(k/2) (buckets grow by a factor of sqrt 2)."""
    if duration_ms < 1.0:
        return 0
    return min(LATENCY_BUCKETS - 1, int(math.floor(2.0 * math.log2(duration_ms))) + 1)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """[low, high) of a bucket in ms; the last bucket is open (high = inf)."""
    if bucket == 0:
        return 0.0, 1.0
    high = math.inf if bucket == LATENCY_BUCKETS - 1 else 2.0 ** (bucket / 2)
    return 2.0 ** ((bucket - 1) / 2), high


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile of samples (the value at rank ceil(q * n)); 0.0 when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else 0.0


def estimate_percentile(histogram: Sequence[int], p: float, maximum: float) -> float | None:
    """The nearest-rank p-th percentile estimated from a histogram: the bucket holding rank ceil(p * n),
    interpolated geometrically at the rank's middle within the bucket, never above the true maximum."""
    total = sum(histogram)
    if total == 0:
        return None
    rank = max(1, math.ceil(p * total - 1e-9))
    seen = 0
    for bucket, count in enumerate(histogram):
        if count and seen + count >= rank:
            low, high = bucket_bounds(bucket)
            high = min(high, max(maximum, low))
            share = (rank - seen - 0.5) / count
            value = low + (high - low) * share if bucket == 0 or low == high else low * (high / low) ** share
            return min(value, maximum)
        seen += count
    return maximum


def _insert(session: AsyncSession, table: Table) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"rollups support SQLite and PostgreSQL, not {dialect}")


async def upsert_add(
    session: AsyncSession,
    table: Table,
    keys: Sequence[str],
    rows: dict[Key, dict[str, Any]],
    maxima: Iterable[str] = (),
) -> None:
    """Add each row's counters to the stored row with the same key (created when missing); columns in
    `maxima` keep the larger value instead."""
    if not rows:
        return
    columns = sorted({c for values in rows.values() for c in values})
    maxima = set(maxima)
    statement = _insert(session, table)
    excluded = statement.excluded
    set_ = {
        c: case((excluded[c] > table.c[c], excluded[c]), else_=table.c[c]) if c in maxima else table.c[c] + excluded[c]
        for c in columns
    }
    statement = statement.on_conflict_do_update(index_elements=list(keys), set_=set_)
    integral = {c for c in columns if isinstance(table.c[c].type, BigInteger | Integer)}
    params = [
        {
            **dict(zip(keys, key, strict=True)),
            **{c: int(values.get(c, 0)) if c in integral else float(values.get(c, 0.0)) for c in columns},
        }
        for key, values in rows.items()
    ]
    await session.execute(statement, params)


async def upsert_replace(session: AsyncSession, table: Table, keys: Sequence[str], rows: list[dict[str, Any]]) -> None:
    """Write whole rows: inserted when new, every other column replaced when the key exists."""
    if not rows:
        return
    statement = _insert(session, table)
    columns = [c for c in rows[0] if c not in keys]
    statement = statement.on_conflict_do_update(
        index_elements=list(keys), set_={c: statement.excluded[c] for c in columns}
    )
    await session.execute(statement, rows)


async def fold_executions(session: AsyncSession, rows: Sequence[Any], settings: LearningSettings) -> None:
    """Add a batch of execution rows to the rollups (all statuses: analytics show refused calls too)."""
    daily: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    hourly: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    errors: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        at = as_utc(row.started_at)
        ok, reached = row.status in SUCCESS, row.status in REACHED_SERVER
        day = daily[(day_of(at), row.caller, row.tool)]
        hour = hourly[(hour_of(at), row.caller)]
        for bucket in (day, hour):
            bucket["calls"] += 1
            bucket["successes"] += int(ok)
            bucket["reached"] += int(reached)
            bucket["duration_sum"] += row.duration_ms if reached else 0.0
        day["input_tokens"] += row.input_tokens or 0
        day["output_tokens"] += row.output_tokens or 0
        day["from_search"] += int(row.search_id is not None)
        if reached:
            day["duration_max"] = max(day["duration_max"], row.duration_ms)
            day[HISTOGRAM[latency_bucket(row.duration_ms)]] += 1
        if not ok:
            # The status, not the exception class: one vocabulary, and the class is None for a tool_error.
            errors[(day_of(at), row.caller, row.tool, row.status[:128])]["count"] += 1
    await upsert_add(session, usage_daily, ["day", "caller", "tool"], daily, maxima=["duration_max"])
    await upsert_add(session, usage_hourly, ["hour", "caller"], hourly)
    await upsert_add(session, usage_errors_daily, ["day", "caller", "tool", "error"], errors)
    await _fold_pairs(session, [r for r in rows if r.status not in IGNORED], settings.cooccurrence_window_seconds)
    await _mark_followed(session, {r.search_id for r in rows if r.search_id})


async def _fold_pairs(session: AsyncSession, rows: Sequence[Any], window_seconds: float) -> None:
    """Pair each call with the caller's previous one (kept across batches in caller_last_call)."""
    if not rows:
        return
    callers = sorted({r.caller for r in rows})
    last: dict[str, tuple[str, datetime]] = {
        caller: (tool, as_utc(at))
        for caller, tool, at in (
            await session.execute(
                select(caller_last_call.c.caller, caller_last_call.c.tool, caller_last_call.c.started_at).where(
                    caller_last_call.c.caller.in_(callers)
                )
            )
        ).all()
    }
    pairs: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    for row in sorted(rows, key=lambda r: (r.caller, as_utc(r.started_at), r.id)):
        at = as_utc(row.started_at)
        previous = last.get(row.caller)
        if previous is not None and at < previous[1]:
            continue  # finished after a later call: too late to pair
        if previous is not None and previous[0] != row.tool and at - previous[1] <= timedelta(seconds=window_seconds):
            first, second = sorted((previous[0], row.tool))
            pairs[(day_of(at), row.caller, first, second)]["count"] += 1
        last[row.caller] = (row.tool, at)
    await upsert_add(session, tool_pairs_daily, ["day", "caller", "tool_a", "tool_b"], pairs)
    statement = _insert(session, caller_last_call)
    statement = statement.on_conflict_do_update(
        index_elements=["caller"],
        set_={"tool": statement.excluded.tool, "started_at": statement.excluded.started_at},
    )
    await session.execute(
        statement, [{"caller": c, "tool": t, "started_at": at} for c, (t, at) in last.items() if c in callers]
    )


async def _mark_followed(session: AsyncSession, search_ids: set[str]) -> None:
    """Count each search the first time its searcher makes a call that names it, in the hour and caller of the
    search (any caller may pass a search_id: another's call marked it, as it no longer counts for its learning).

    Both logs mark: a call folded before its search was written finds no row to mark, so each batch of
    searches also marks those a logged call already came from. `followed_at IS NULL` makes whichever side comes
    second a no-op."""
    if not search_ids:
        return
    ids, marked = sorted(search_ids), []
    by_searcher = exists().where(executions.c.search_id == searches.c.id, executions.c.caller == searches.c.caller)
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        statement = (
            update(searches)
            .where(searches.c.id.in_(ids[start : start + IDS_PER_STATEMENT]))
            .where(searches.c.followed_at.is_(None), by_searcher)
            .values(followed_at=utcnow())
            .returning(searches.c.created_at, searches.c.caller)
        )
        marked.extend((await session.execute(statement)).all())
    hourly: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    for created_at, caller in marked:
        hourly[(hour_of(created_at), caller)]["followed_searches"] += 1
    await upsert_add(session, usage_hourly, ["hour", "caller"], hourly)


async def fold_searches(session: AsyncSession, rows: Sequence[tuple[Any, ...]]) -> None:
    """Add a batch of searches (id, caller, created_at, result_count) to the hourly rollup."""
    hourly: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    for _id, caller, created_at, result_count in rows:
        bucket = hourly[(hour_of(created_at), caller)]
        bucket["searches"] += 1
        bucket["empty_searches"] += int(result_count == 0)
    await upsert_add(session, usage_hourly, ["hour", "caller"], hourly)
    await _mark_followed(session, {row[0] for row in rows})
