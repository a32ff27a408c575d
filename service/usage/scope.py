"""Which rows an analytics query reads (a Scope), who may read which, and the SQL terms of a scope.

Admins read every caller; other callers read their own rows, and everyone reads only the tools they may use."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, false
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from service.db.among import among
from service.db.models import as_utc
from service.db.rollup_tables import usage_hourly
from service.errors import InvalidRequest, PermissionDenied
from service.policy.callers import Caller
from service.policy.service import visible_names
from service.usage.rollups import day_of, hour_of

if TYPE_CHECKING:
    from service.resources import Resources

DEFAULT_DAYS = 30


@dataclass(frozen=True)
class Scope:
    """Which rows an analytics query reads."""

    since: datetime | None = None
    until: datetime | None = None  # exclusive
    caller: str | None = None  # only this caller's rows (always set for a non-admin reader)
    tools: frozenset[str] | None = None  # only these tools (the reader's permitted tools); None = all


class day_label(FunctionElement[str]):  # noqa: N801 - a SQL function name
    """ISO-8601 label of the UTC day a timestamp falls in, e.g. 2026-01-31T00:00:00Z."""

    type = String()
    inherit_cache = True


@compiles(day_label, "sqlite")
def _day_label_sqlite(element: day_label, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strftime('%Y-%m-%dT00:00:00Z', {compiler.process(list(element.clauses)[0], **kw)})"


@compiles(day_label, "postgresql")
def _day_label_postgresql(element: day_label, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(list(element.clauses)[0], **kw)
    return f"to_char(date_trunc('day', {column} AT TIME ZONE 'UTC'), 'YYYY-MM-DD\"T00:00:00Z\"')"


def window_terms(column: Any, scope: Scope, floor: Any) -> list[Any]:
    """WHERE terms of the time window on a column, its lower bound floored to the rollup's granularity."""
    terms = []
    if scope.since is not None:
        terms.append(column >= floor(scope.since))
    if scope.until is not None:
        terms.append(column < scope.until)
    return terms


def tool_terms(column: Any, scope: Scope) -> list[Any]:
    """WHERE terms of the tools the reader may see (none at all: nothing matches)."""
    if scope.tools is None:
        return []
    if not scope.tools:
        return [false()]
    return [among(column, scope.tools)]


def daily_filter(table: Any, scope: Scope, *tool_columns: Any) -> list[Any]:
    """WHERE terms of a daily rollup: the days overlapping the window, the caller, the permitted tools."""
    terms = window_terms(table.day, scope, day_of)
    if scope.caller is not None:
        terms.append(table.caller == scope.caller)
    for column in tool_columns or (table.tool,):
        terms += tool_terms(column, scope)
    return terms


def hourly_filter(scope: Scope) -> list[Any]:
    """WHERE terms of the hourly rollup (it has no tool: a restricted reader sees its own totals)."""
    terms = window_terms(usage_hourly.c.hour, scope, hour_of)
    if scope.caller is not None:
        terms.append(usage_hourly.c.caller == scope.caller)
    return terms


def build_scope(
    resources: Resources,
    caller: Caller,
    since: datetime | None,
    until: datetime | None,
    of_caller: str | None,
    default_days: float | None = DEFAULT_DAYS,
) -> Scope:
    """The rows this reader may aggregate over; a window whose `until` is not after its `since` is a 422."""
    since_given = since is not None
    if since is None and default_days is not None:
        since = datetime.now(UTC) - timedelta(days=default_days)
    if not caller.is_admin:
        if of_caller is not None and of_caller != caller.id:
            raise PermissionDenied("Only admins may read other callers' analytics", caller=of_caller)
        of_caller = caller.id
    start, end = _window_bound("since", since), _window_bound("until", until)
    if start is not None and end is not None and end <= start:  # an empty window: every figure would be 0
        start_said = "`since`" if since_given else f"`since` ({default_days:g} days ago, `days`, {start:%Y-%m-%d})"
        reason = f"until ({end.isoformat()}) is not after {start_said}"
        raise InvalidRequest(f"The window is empty: {reason}", errors=[{"pointer": "/query/until", "reason": reason}])
    return Scope(start, end, of_caller, visible_names(resources, caller))


def _window_bound(name: str, moment: datetime | None) -> datetime | None:
    """A window bound in UTC; one that has no UTC time (year 1 with a positive offset) is a 422, not a 500."""
    try:
        return as_utc(moment)
    except OverflowError as exc:
        raise InvalidRequest(
            f"`{name}` is out of the range of dates", errors=[{"pointer": f"/query/{name}", "reason": str(exc)}]
        ) from exc
