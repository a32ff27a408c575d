"""Analytics over the search and execution logs: SQL aggregates that run unchanged on SQLite and PostgreSQL.

Percentiles are nearest-rank, computed with window functions (no percentile_cont); the two expressions that
differ between the engines (a time bucket label and epoch seconds) are compiled per dialect below. Every
query takes a Scope: a time window, optionally one caller, and the tools the reader may see."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    Float,
    String,
    and_,
    case,
    distinct,
    exists,
    false,
    func,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from service.db.models import Execution, Search, Tool, ToolSearchStats, ToolStats
from service.stats import REACHED_SERVER, SUCCESS, as_utc

Bucket = Literal["hour", "day"]
UnansweredKind = Literal["no_result", "no_call"]
E, S = Execution.__table__.c, Search.__table__.c


@dataclass(frozen=True)
class Scope:
    """Which rows an analytics query reads."""

    since: datetime | None = None
    until: datetime | None = None
    caller: str | None = None  # only this caller's rows (always set for a non-admin reader)
    tools: frozenset[str] | None = None  # only these tools (the reader's permitted tools); None = all


class hour_bucket(FunctionElement[str]):  # noqa: N801 - a SQL function name
    """ISO-8601 label of the UTC hour a timestamp falls in, e.g. 2026-01-31T13:00:00Z."""

    type = String()
    inherit_cache = True


class day_bucket(FunctionElement[str]):  # noqa: N801 - a SQL function name
    """ISO-8601 label of the UTC day a timestamp falls in, e.g. 2026-01-31T00:00:00Z."""

    type = String()
    inherit_cache = True


_SQLITE_FORMATS = {hour_bucket: "%Y-%m-%dT%H:00:00Z", day_bucket: "%Y-%m-%dT00:00:00Z"}
_POSTGRES_FORMATS = {hour_bucket: ("hour", 'YYYY-MM-DD"T"HH24:00:00"Z"'), day_bucket: ("day", 'YYYY-MM-DD"T00:00:00Z"')}


@compiles(hour_bucket, "sqlite")
@compiles(day_bucket, "sqlite")
def _bucket_sqlite(element: hour_bucket | day_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    column = list(element.clauses)[0]
    return f"strftime('{_SQLITE_FORMATS[type(element)]}', {compiler.process(column, **kw)})"


@compiles(hour_bucket, "postgresql")
@compiles(day_bucket, "postgresql")
def _bucket_postgresql(element: hour_bucket | day_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    column = list(element.clauses)[0]
    field, fmt = _POSTGRES_FORMATS[type(element)]
    return f"to_char(date_trunc('{field}', {compiler.process(column, **kw)} AT TIME ZONE 'UTC'), '{fmt}')"


class epoch_seconds(FunctionElement[float]):  # noqa: N801 - a SQL function name
    """Seconds since 1970-01-01 UTC of a timestamp."""

    type = Float()
    inherit_cache = True


@compiles(epoch_seconds, "sqlite")
def _epoch_sqlite(element: epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"((julianday({compiler.process(list(element.clauses)[0], **kw)}) - 2440587.5) * 86400.0)"


@compiles(epoch_seconds, "postgresql")
def _epoch_postgresql(element: epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"EXTRACT(EPOCH FROM {compiler.process(list(element.clauses)[0], **kw)})"


def _bucket(column: Any, bucket: Bucket) -> hour_bucket | day_bucket:
    if bucket == "hour":
        return hour_bucket(column)
    if bucket == "day":
        return day_bucket(column)
    raise ValueError(f"bucket must be hour or day, not {bucket!r}")


def _tool_filter(column: Any, scope: Scope) -> list[Any]:
    if scope.tools is None:
        return []
    if not scope.tools:
        return [false()]
    return [column.in_(sorted(scope.tools))]


def execution_filter(scope: Scope) -> list[Any]:
    """WHERE terms of the executions in scope."""
    terms: list[Any] = []
    if scope.since is not None:
        terms.append(E.started_at >= scope.since)
    if scope.until is not None:
        terms.append(E.started_at < scope.until)
    if scope.caller is not None:
        terms.append(E.caller == scope.caller)
    return terms + _tool_filter(E.tool, scope)


def search_filter(scope: Scope) -> list[Any]:
    """WHERE terms of the searches in scope (searches name no tool, so only time and caller apply)."""
    terms: list[Any] = []
    if scope.since is not None:
        terms.append(S.created_at >= scope.since)
    if scope.until is not None:
        terms.append(S.created_at < scope.until)
    if scope.caller is not None:
        terms.append(S.caller == scope.caller)
    return terms


def _ratio(part: float | int | None, whole: float | int | None) -> float | None:
    return round(part / whole, 4) if whole else None


def _ms(value: float | None) -> float | None:
    return round(float(value), 3) if value is not None else None


def _iso(value: datetime | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):  # SQLite aggregates (max) of timestamps come back as text
        value = datetime.fromisoformat(value)
    return as_utc(value).isoformat()


async def tool_usage(session: AsyncSession, scope: Scope, *, tool: str | None = None,
                     limit: int = 50) -> list[dict[str, Any]]:
    """Per tool: calls, successes, success rate, p50/p95/max latency of the calls that reached the server,
    tokens and errors by class; most called first."""
    reached = case((E.status.in_(sorted(REACHED_SERVER)), 1), else_=0)
    where = execution_filter(scope) + ([E.tool == tool] if tool else [])
    ranked = (
        select(
            E.tool, E.status, E.duration_ms, E.input_tokens, E.output_tokens, reached.label("reached"),
            func.row_number().over(partition_by=(E.tool, reached), order_by=E.duration_ms).label("rn"),
            func.count().over(partition_by=(E.tool, reached)).label("n"),
        )
        .where(*where)
        .subquery()
    )
    r = ranked.c
    on_server = r.reached == 1

    def percentile(p: float) -> Any:
        # Nearest rank: the smallest duration whose rank reaches p * n.
        return func.min(case((and_(on_server, r.rn >= p * r.n), r.duration_ms)))

    calls = func.count().label("calls")
    query = (
        select(
            r.tool, calls,
            func.sum(case((r.status.in_(sorted(SUCCESS)), 1), else_=0)).label("successes"),
            func.sum(r.reached).label("reached"),
            func.avg(case((on_server, r.duration_ms))).label("mean"),
            percentile(0.5).label("p50"), percentile(0.95).label("p95"),
            func.max(case((on_server, r.duration_ms))).label("max"),
            func.sum(r.input_tokens).label("input_tokens"), func.sum(r.output_tokens).label("output_tokens"),
        )
        .group_by(r.tool)
        .order_by(calls.desc(), r.tool)
        .limit(limit)
    )
    rows = (await session.execute(query)).all()
    names = [row.tool for row in rows]
    errors = await errors_by_class(session, scope, names) if names else {}
    return [
        {
            "tool": row.tool, "calls": row.calls, "successes": int(row.successes or 0),
            "success_rate": _ratio(row.successes or 0, row.calls),
            "latency_ms": {"mean": _ms(row.mean), "p50": _ms(row.p50), "p95": _ms(row.p95), "max": _ms(row.max),
                           "calls": int(row.reached or 0)},
            "input_tokens": int(row.input_tokens or 0), "output_tokens": int(row.output_tokens or 0),
            "errors": errors.get(row.tool, {}),
        }
        for row in rows
    ]


async def errors_by_class(session: AsyncSession, scope: Scope, tools: list[str] | None = None
                          ) -> dict[str, dict[str, int]]:
    """tool -> error class (or the status when no class was recorded) -> count, for the calls that failed."""
    label = func.coalesce(E.error_class, E.status).label("error")
    where = execution_filter(scope) + [E.status.not_in(sorted(SUCCESS))]
    if tools is not None:
        where.append(E.tool.in_(tools))
    rows = (await session.execute(
        select(E.tool, label, func.count().label("n")).where(*where).group_by(E.tool, label)
    )).all()
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row.tool, {})[row.error] = row.n
    return {name: dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) for name, counts in out.items()}


async def timeseries(session: AsyncSession, scope: Scope, bucket: Bucket = "hour",
                     tool: str | None = None) -> list[dict[str, Any]]:
    """Per UTC hour or day: calls, successes, failures, mean latency, distinct callers and searches."""
    label = _bucket(E.started_at, bucket).label("bucket")
    where = execution_filter(scope) + ([E.tool == tool] if tool else [])
    calls = (await session.execute(
        select(
            label, func.count().label("calls"),
            func.sum(case((E.status.in_(sorted(SUCCESS)), 1), else_=0)).label("successes"),
            func.avg(E.duration_ms).label("mean"), func.count(distinct(E.caller)).label("callers"),
        ).where(*where).group_by(label)
    )).all()
    series: dict[str, dict[str, Any]] = {
        row.bucket: {
            "bucket": row.bucket, "calls": row.calls, "successes": int(row.successes or 0),
            "failures": row.calls - int(row.successes or 0), "success_rate": _ratio(row.successes or 0, row.calls),
            "mean_latency_ms": _ms(row.mean), "callers": row.callers, "searches": 0, "empty_searches": 0,
        }
        for row in calls
    }
    if tool is None:
        slabel = _bucket(S.created_at, bucket).label("bucket")
        searches = (await session.execute(
            select(slabel, func.count().label("n"),
                   func.sum(case((S.result_count == 0, 1), else_=0)).label("empty"))
            .where(*search_filter(scope)).group_by(slabel)
        )).all()
        for row in searches:
            entry = series.setdefault(row.bucket, {
                "bucket": row.bucket, "calls": 0, "successes": 0, "failures": 0, "success_rate": None,
                "mean_latency_ms": None, "callers": 0, "searches": 0, "empty_searches": 0,
            })
            entry["searches"], entry["empty_searches"] = row.n, int(row.empty or 0)
    return [series[key] for key in sorted(series)]


async def top_callers(session: AsyncSession, scope: Scope, limit: int = 20) -> list[dict[str, Any]]:
    """The callers with the most calls: calls, success rate, distinct tools, last call, searches."""
    calls = func.count().label("calls")
    rows = (await session.execute(
        select(
            E.caller, calls, func.sum(case((E.status.in_(sorted(SUCCESS)), 1), else_=0)).label("successes"),
            func.count(distinct(E.tool)).label("tools"), func.max(E.started_at).label("last_call"),
        ).where(*execution_filter(scope)).group_by(E.caller).order_by(calls.desc(), E.caller).limit(limit)
    )).all()
    names = [row.caller for row in rows]
    searches: dict[str, int] = {}
    if names:
        searches = dict((await session.execute(
            select(S.caller, func.count()).where(*search_filter(scope), S.caller.in_(names)).group_by(S.caller)
        )).tuples().all())
    return [
        {"caller": row.caller, "calls": row.calls, "successes": int(row.successes or 0),
         "success_rate": _ratio(row.successes or 0, row.calls), "tools": row.tools,
         "last_call_at": _iso(row.last_call), "searches": searches.get(row.caller, 0)}
        for row in rows
    ]


async def cooccurrence(session: AsyncSession, scope: Scope, *, window_seconds: float = 300.0,
                       limit: int = 50) -> list[dict[str, Any]]:
    """Tools used together: pairs of different tools called one right after the other by the same caller
    within `window_seconds`, counted once per such transition (unordered pairs), most frequent first."""
    order = (E.started_at, E.id)
    at = epoch_seconds(E.started_at)
    sequence = (
        select(
            E.tool,
            func.lag(E.tool).over(partition_by=E.caller, order_by=order).label("previous"),
            (at - func.lag(at).over(partition_by=E.caller, order_by=order)).label("gap"),
        )
        .where(*execution_filter(scope), E.status != "denied")
        .subquery()
    )
    q = sequence.c
    first = case((q.previous < q.tool, q.previous), else_=q.tool).label("tool_a")
    second = case((q.previous < q.tool, q.tool), else_=q.previous).label("tool_b")
    count = func.count().label("n")
    rows = (await session.execute(
        select(first, second, count)
        .where(q.previous.is_not(None), q.previous != q.tool, q.gap <= window_seconds)
        .group_by(first, second)
        .order_by(count.desc(), first, second)
        .limit(limit)
    )).all()
    return [{"tools": [row.tool_a, row.tool_b], "count": row.n} for row in rows]


async def conversion(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    """Search -> call conversion: searches, searches followed by at least one call, empty searches, and
    calls that came from a search versus calls made by name."""
    followed = (
        select(E.search_id).where(E.search_id.is_not(None), *execution_filter(scope)).distinct().subquery()
    )
    searches = (await session.execute(
        select(
            func.count().label("searches"), func.count(followed.c.search_id).label("followed"),
            func.sum(case((S.result_count == 0, 1), else_=0)).label("empty"),
        ).select_from(Search.__table__.outerjoin(followed, followed.c.search_id == S.id)).where(*search_filter(scope))
    )).one()
    calls = (await session.execute(
        select(func.count().label("calls"),
               func.sum(case((E.search_id.is_not(None), 1), else_=0)).label("from_search"))
        .where(*execution_filter(scope))
    )).one()
    total_calls, from_search = calls.calls, int(calls.from_search or 0)
    return {
        "searches": searches.searches, "searches_followed_by_call": searches.followed,
        "conversion_rate": _ratio(searches.followed, searches.searches),
        "searches_without_result": int(searches.empty or 0),
        "calls": total_calls, "calls_from_search": from_search, "calls_by_name": total_calls - from_search,
    }


async def unanswered_searches(session: AsyncSession, scope: Scope, kind: UnansweredKind = "no_result",
                              limit: int = 50) -> list[dict[str, Any]]:
    """Queries that found nothing (`no_result`) or that no call followed (`no_call`), grouped by text."""
    if kind == "no_result":
        condition = S.result_count == 0
    elif kind == "no_call":
        condition = ~exists().where(E.search_id == S.id)
    else:
        raise ValueError(f"kind must be no_result or no_call, not {kind!r}")
    count = func.count().label("n")
    rows = (await session.execute(
        select(S.query, count, func.count(distinct(S.caller)).label("callers"), func.max(S.created_at).label("last"))
        .where(*search_filter(scope), condition)
        .group_by(S.query)
        .order_by(count.desc(), S.query)
        .limit(limit)
    )).all()
    return [{"query": row.query, "count": row.n, "callers": row.callers, "last_at": _iso(row.last)} for row in rows]


async def never_found(session: AsyncSession, scope: Scope, limit: int = 100) -> list[dict[str, Any]]:
    """Active tools that no search returned (since `scope.since` when set), with their calls by name.

    Reads `tool_search_stats`, which the statistics refresh keeps from the search log."""
    T, SS, TS = Tool.__table__.c, ToolSearchStats.__table__.c, ToolStats.__table__.c
    not_returned = SS.tool.is_(None) | (SS.appearances == 0)
    if scope.since is not None:
        not_returned = not_returned | (SS.last_returned_at < scope.since)
    rows = (await session.execute(
        select(T.qualified_name, T.server_id, T.first_seen_at, SS.last_returned_at,
               func.coalesce(TS.calls, 0).label("calls"))
        .select_from(
            Tool.__table__.outerjoin(ToolSearchStats.__table__, SS.tool == T.qualified_name)
            .outerjoin(ToolStats.__table__, TS.tool == T.qualified_name)
        )
        .where(T.deprecated.is_(False), not_returned, *_tool_filter(T.qualified_name, scope))
        .order_by(T.qualified_name)
        .limit(limit)
    )).all()
    return [
        {"tool": row.qualified_name, "server": row.server_id, "first_seen_at": _iso(row.first_seen_at),
         "last_returned_at": _iso(row.last_returned_at), "calls": int(row.calls)}
        for row in rows
    ]
