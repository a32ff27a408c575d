"""Analytics over the search and execution logs: SQL aggregates that run unchanged on SQLite and PostgreSQL.

They read the rollups that the statistics refresh folds from the logs (usage/rollups.py), so a query costs
in proportion to days x callers x tools, not to the number of calls: a month of a million calls answers in
milliseconds. Windows are widened to whole UTC days (per-tool figures, callers, pairs) or hours (time
series, searches); the newest calls appear once the refresh has consumed them (seconds). Latency
percentiles are nearest-rank estimates from a log histogram whose buckets grow by sqrt 2 (within ~20%);
counts, means and maxima are exact. Every query takes a Scope (usage/scope.py): a time window, optionally one
caller, and the tools the reader may see."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.among import among
from service.db.models import Search, Tool, ToolSearchStats, ToolStats, active
from service.db.rollup_tables import tool_pairs_daily, usage_daily, usage_errors_daily, usage_hourly
from service.usage.rollups import HISTOGRAM, as_utc, estimate_percentile
from service.usage.scope import Scope, daily_filter, day_label, hourly_filter, tool_terms, window_terms

Bucket = Literal["hour", "day"]
UnansweredKind = Literal["no_result", "no_call"]
D, H, ERR, PAIRS, S = (
    usage_daily.c,
    usage_hourly.c,
    usage_errors_daily.c,
    tool_pairs_daily.c,
    Search.__table__.c,
)


def _ratio(part: float | int | None, whole: float | int | None) -> float | None:
    return round(part / whole, 4) if whole else None


def _ms(value: float | None) -> float | None:
    return round(float(value), 3) if value is not None else None


def _iso(value: datetime | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):  # SQLite aggregates (max) of timestamps may come back as text
        value = datetime.fromisoformat(value)
    return as_utc(value).isoformat()


def _day(value: datetime | str | None) -> str | None:
    """A UTC day as 2026-12-07 (it read 2026-12-07T00:00:00+00:00, a midnight the caller never saw)."""
    iso = _iso(value)
    return iso[:10] if iso else None


def _int(value: Any) -> int:
    return int(value or 0)


async def tool_usage(
    session: AsyncSession, scope: Scope, *, tool: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Per tool: calls, successes, success rate, mean/p50/p95/max latency of the calls that reached the
    server, tokens, calls from a search, and failed calls by status; most called first."""
    calls = func.sum(D.calls).label("calls")
    where = daily_filter(D, scope) + ([D.tool == tool] if tool else [])
    rows = (
        await session.execute(
            select(
                D.tool,
                calls,
                func.sum(D.successes).label("successes"),
                func.sum(D.reached).label("reached"),
                func.sum(D.duration_sum).label("duration_sum"),
                func.max(D.duration_max).label("duration_max"),
                func.sum(D.input_tokens).label("input_tokens"),
                func.sum(D.output_tokens).label("output_tokens"),
                func.sum(D.from_search).label("from_search"),
                *[func.sum(D[h]).label(h) for h in HISTOGRAM],
            )
            .where(*where)
            .group_by(D.tool)
            .order_by(calls.desc(), D.tool)
            .limit(limit)
        )
    ).all()
    names = [row.tool for row in rows]
    errors = await errors_by_status(session, scope, names) if names else {}
    out = []
    for row in rows:
        histogram = [_int(getattr(row, h)) for h in HISTOGRAM]
        reached, maximum = _int(row.reached), float(row.duration_max or 0.0)
        out.append(
            {
                "tool": row.tool,
                "calls": _int(row.calls),
                "successes": _int(row.successes),
                "success_rate": _ratio(_int(row.successes), _int(row.calls)),
                "latency_ms": {
                    "mean": _ms(row.duration_sum / reached) if reached else None,
                    "p50": _ms(estimate_percentile(histogram, 0.50, maximum)),
                    "p95": _ms(estimate_percentile(histogram, 0.95, maximum)),
                    "max": _ms(maximum) if reached else None,
                    "calls": reached,
                },
                "input_tokens": _int(row.input_tokens),
                "output_tokens": _int(row.output_tokens),
                "from_search": _int(row.from_search),
                "errors": errors.get(row.tool, {}),
            }
        )
    return out


async def errors_by_status(
    session: AsyncSession, scope: Scope, tools: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """tool -> execution status (tool_error, invalid_arguments, timeout ...) -> count of failed calls."""
    where = daily_filter(ERR, scope) + ([among(ERR.tool, tools)] if tools is not None else [])
    rows = (
        await session.execute(
            select(ERR.tool, ERR.error, func.sum(ERR.count).label("n")).where(*where).group_by(ERR.tool, ERR.error)
        )
    ).all()
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row.tool, {})[row.error] = _int(row.n)
    return {name: dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) for name, counts in out.items()}


def _bucket_entry(label: str) -> dict[str, Any]:
    return {
        "bucket": label,
        "calls": 0,
        "successes": 0,
        "failures": 0,
        "success_rate": None,
        "mean_latency_ms": None,
        "callers": 0,
        "searches": 0,
        "empty_searches": 0,
    }


async def timeseries(session: AsyncSession, scope: Scope, bucket: Bucket = "hour") -> list[dict[str, Any]]:
    """Per UTC hour or day: calls, successes, failures (every other outcome), mean latency of the calls that
    reached the server, distinct callers, searches and searches without result. Daily series count only the
    permitted tools; hourly ones count all of the scope's calls (the hourly rollup has no tool)."""
    if bucket == "hour":
        label: Any = H.hour
        calls_query = (
            select(
                label.label("bucket"),
                func.sum(H.calls).label("calls"),
                func.sum(H.successes).label("successes"),
                func.sum(H.reached).label("reached"),
                func.sum(H.duration_sum).label("duration_sum"),
                func.count(distinct(H.caller)).label("callers"),
            )
            .where(*hourly_filter(scope), H.calls > 0)
            .group_by(label)
        )
        search_label: Any = H.hour
    elif bucket == "day":
        label = day_label(D.day)
        calls_query = (
            select(
                label.label("bucket"),
                func.sum(D.calls).label("calls"),
                func.sum(D.successes).label("successes"),
                func.sum(D.reached).label("reached"),
                func.sum(D.duration_sum).label("duration_sum"),
                func.count(distinct(D.caller)).label("callers"),
            )
            .where(*daily_filter(D, scope))
            .group_by(label)
        )
        search_label = day_label(H.hour)
    else:
        raise ValueError(f"bucket must be hour or day, not {bucket!r}")

    def key(value: Any) -> str:
        # An hour reads as its start in UTC, a day as a day (it read 2026-12-07T00:00:00Z, a midnight).
        if isinstance(value, datetime):
            return as_utc(value).strftime("%Y-%m-%dT%H:00:00Z" if bucket == "hour" else "%Y-%m-%d")
        return str(value)[:10] if bucket == "day" else str(value)

    series: dict[str, dict[str, Any]] = {}
    for row in (await session.execute(calls_query)).all():
        entry = series.setdefault(key(row.bucket), _bucket_entry(key(row.bucket)))
        calls, successes, reached = _int(row.calls), _int(row.successes), _int(row.reached)
        entry.update(
            calls=calls,
            successes=successes,
            failures=calls - successes,
            success_rate=_ratio(successes, calls),
            callers=_int(row.callers),
            mean_latency_ms=_ms(row.duration_sum / reached) if reached else None,
        )
    searches = (
        await session.execute(
            select(
                search_label.label("bucket"),
                func.sum(H.searches).label("n"),
                func.sum(H.empty_searches).label("empty"),
            )
            .where(*hourly_filter(scope), H.searches > 0)
            .group_by(search_label)
        )
    ).all()
    for row in searches:
        entry = series.setdefault(key(row.bucket), _bucket_entry(key(row.bucket)))
        entry["searches"], entry["empty_searches"] = _int(row.n), _int(row.empty)
    return [series[label] for label in sorted(series)]


async def top_callers(session: AsyncSession, scope: Scope, limit: int = 20) -> list[dict[str, Any]]:
    """The callers with the most calls: calls, success rate, distinct tools, last active day, searches."""
    calls = func.sum(D.calls).label("calls")
    rows = (
        await session.execute(
            select(
                D.caller,
                calls,
                func.sum(D.successes).label("successes"),
                func.count(distinct(D.tool)).label("tools"),
                func.max(D.day).label("last_day"),
            )
            .where(*daily_filter(D, scope))
            .group_by(D.caller)
            .order_by(calls.desc(), D.caller)
            .limit(limit)
        )
    ).all()
    names = [row.caller for row in rows]
    searches: dict[str, int] = {}
    if names:
        searches = {
            caller: _int(n)
            for caller, n in (
                await session.execute(
                    select(H.caller, func.sum(H.searches))
                    .where(*hourly_filter(scope), H.caller.in_(names))
                    .group_by(H.caller)
                )
            )
            .tuples()
            .all()
        }
    return [
        {
            "caller": row.caller,
            "calls": _int(row.calls),
            "successes": _int(row.successes),
            "success_rate": _ratio(_int(row.successes), _int(row.calls)),
            "tools": _int(row.tools),
            "last_active_day": _day(row.last_day),
            "searches": searches.get(row.caller, 0),
        }
        for row in rows
    ]


async def cooccurrence(session: AsyncSession, scope: Scope, *, limit: int = 50) -> list[dict[str, Any]]:
    """Tools used together: pairs of different tools one caller called one right after the other within
    the configured window (learning.cooccurrence_window_seconds), most frequent first."""
    count = func.sum(PAIRS.count).label("n")
    rows = (
        await session.execute(
            select(PAIRS.tool_a, PAIRS.tool_b, count)
            .where(*daily_filter(PAIRS, scope, PAIRS.tool_a, PAIRS.tool_b))
            .group_by(PAIRS.tool_a, PAIRS.tool_b)
            .order_by(count.desc(), PAIRS.tool_a, PAIRS.tool_b)
            .limit(limit)
        )
    ).all()
    return [{"tools": [row.tool_a, row.tool_b], "count": _int(row.n)} for row in rows]


async def conversion(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    """Search -> call conversion: searches, searches that at least one call came from, searches without
    result, and calls that came from a search versus calls made by name."""
    searches = (
        await session.execute(
            select(
                func.sum(H.searches).label("searches"),
                func.sum(H.followed_searches).label("followed"),
                func.sum(H.empty_searches).label("empty"),
            ).where(*hourly_filter(scope))
        )
    ).one()
    calls = (
        await session.execute(
            select(func.sum(D.calls).label("calls"), func.sum(D.from_search).label("from_search")).where(
                *daily_filter(D, scope)
            )
        )
    ).one()
    total, followed, from_search = _int(searches.searches), _int(searches.followed), _int(calls.from_search)
    return {
        "searches": total,
        "searches_followed_by_call": followed,
        "conversion_rate": _ratio(followed, total),
        "searches_without_result": _int(searches.empty),
        "calls": _int(calls.calls),
        "calls_from_search": from_search,
        "calls_by_name": _int(calls.calls) - from_search,
    }


async def unanswered_searches(
    session: AsyncSession, scope: Scope, kind: UnansweredKind = "no_result", limit: int = 50
) -> list[dict[str, Any]]:
    """Queries that found nothing (`no_result`) or that no call came from (`no_call`), grouped by text."""
    if kind == "no_result":
        condition = S.result_count == 0
    elif kind == "no_call":
        condition = S.followed_at.is_(None)
    else:
        raise ValueError(f"kind must be no_result or no_call, not {kind!r}")
    terms = [condition] + window_terms(S.created_at, scope, lambda moment: moment)
    if scope.caller is not None:
        terms.append(S.caller == scope.caller)
    count = func.count().label("n")
    rows = (
        await session.execute(
            select(
                S.query,
                count,
                func.count(distinct(S.caller)).label("callers"),
                func.max(S.created_at).label("last"),
            )
            .where(*terms)
            .group_by(S.query)
            .order_by(count.desc(), S.query)
            .limit(limit)
        )
    ).all()
    return [{"query": row.query, "count": row.n, "callers": row.callers, "last_at": _iso(row.last)} for row in rows]


async def never_found(session: AsyncSession, scope: Scope, limit: int = 100) -> list[dict[str, Any]]:
    """Active tools that no search returned (since `scope.since` when set), with their calls by name: every
    caller's for an admin, the reader's own for a reader scoped to one caller, who is not told when a search (of
    any caller) last returned a tool."""
    T, SS = Tool.__table__.c, ToolSearchStats.__table__.c
    not_returned = SS.tool.is_(None) | (SS.appearances == 0)
    if scope.since is not None:
        not_returned = not_returned | (SS.last_returned_at < scope.since)
    if scope.caller is None:
        calls = ToolStats.__table__
    else:
        calls = (
            select(D.tool, func.sum(D.calls).label("calls")).where(D.caller == scope.caller).group_by(D.tool).subquery()
        )
    rows = (
        await session.execute(
            select(
                T.qualified_name,
                T.server_id,
                T.first_seen_at,
                SS.last_returned_at,
                func.coalesce(calls.c.calls, 0).label("calls"),
            )
            .select_from(
                Tool.__table__.outerjoin(ToolSearchStats.__table__, SS.tool == T.qualified_name).outerjoin(
                    calls, calls.c.tool == T.qualified_name
                )
            )
            .where(active(T), not_returned, *tool_terms(T.qualified_name, scope))
            .order_by(T.qualified_name)
            .limit(limit)
        )
    ).all()
    return [
        {
            "tool": row.qualified_name,
            "server": row.server_id,
            "first_seen_at": _iso(row.first_seen_at),
            "last_returned_at": _iso(row.last_returned_at) if scope.caller is None else None,  # another's search
            "calls": int(row.calls),
        }
        for row in rows
    ]
