"""GET /analytics/...: what agents search for and call. Admins see every caller; other callers see their own
rows, and everyone sees only the tools they may use. The figures come from rollups that the statistics
refresh keeps (usage/analytics.py explains their granularity; usage/scope.py who reads what)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from service.deps import CallerDep, ResourcesDep, SessionDep
from service.errors import PermissionDenied
from service.usage import analytics
from service.usage.scope import DEFAULT_DAYS, Scope, build_scope

router = APIRouter(prefix="/analytics", tags=["analytics"])


async def scope_dep(
    resources: ResourcesDep,
    caller: CallerDep,
    since: Annotated[
        datetime | None, Query(description=f"From (ISO 8601, UTC); default {DEFAULT_DAYS} days ago")
    ] = None,
    until: Annotated[datetime | None, Query(description="Until, exclusive (ISO 8601, UTC)")] = None,
    days: Annotated[
        float | None,
        Query(gt=0, le=36500, description=f"The window when `since` is not given: so many days back ({DEFAULT_DAYS})"),
    ] = None,
    of_caller: Annotated[str | None, Query(alias="caller", description="Only this caller (admins)")] = None,
) -> Scope:
    # `days` is the command line's --days: the two took different window options.
    return build_scope(resources, caller, since, until, of_caller, default_days=days or DEFAULT_DAYS)


ScopeDep = Annotated[Scope, Depends(scope_dep)]
Limit = Annotated[int, Query(ge=1, le=1000)]


class LatencyView(BaseModel):
    mean: float | None
    p50: float | None
    p95: float | None
    max: float | None
    calls: int


class ToolUsage(BaseModel):
    tool: str
    calls: int
    successes: int
    success_rate: float | None
    latency_ms: LatencyView
    input_tokens: int
    output_tokens: int
    from_search: int
    errors: dict[str, int]


class ToolUsageResponse(BaseModel):
    tools: list[ToolUsage]


class Bucket(BaseModel):
    bucket: str
    calls: int
    successes: int
    failures: int
    success_rate: float | None
    mean_latency_ms: float | None
    callers: int
    searches: int
    empty_searches: int


class TimeseriesResponse(BaseModel):
    bucket: Literal["hour", "day"]
    series: list[Bucket]


class CallerUsage(BaseModel):
    caller: str
    calls: int
    successes: int
    success_rate: float | None
    tools: int
    last_active_day: str | None
    searches: int


class CallersResponse(BaseModel):
    callers: list[CallerUsage]


class Pair(BaseModel):
    tools: list[str]
    count: int


class CooccurrenceResponse(BaseModel):
    window_seconds: float
    pairs: list[Pair]


class ConversionResponse(BaseModel):
    searches: int
    searches_followed_by_call: int
    conversion_rate: float | None
    searches_without_result: int
    calls: int
    calls_from_search: int
    calls_by_name: int


class UnansweredQuery(BaseModel):
    query: str
    count: int
    callers: int
    last_at: str | None


class UnansweredResponse(BaseModel):
    kind: Literal["no_result", "no_call"]
    queries: list[UnansweredQuery]


class NeverFoundTool(BaseModel):
    tool: str
    server: str
    first_seen_at: str | None
    last_returned_at: str | None
    calls: int


class NeverFoundResponse(BaseModel):
    tools: list[NeverFoundTool]


@router.get("/tools", response_model=ToolUsageResponse)
async def tools(session: SessionDep, scope: ScopeDep, tool: str | None = None, limit: Limit = 50) -> dict[str, Any]:
    """Per tool: calls, success rate, p50/p95 latency, tokens, failed calls by execution status."""
    return {"tools": await analytics.tool_usage(session, scope, tool=tool, limit=limit)}


@router.get("/tools/never-found", response_model=NeverFoundResponse)
async def tools_never_found(
    session: SessionDep,
    resources: ResourcesDep,
    caller: CallerDep,
    since: datetime | None = None,
    limit: Limit = 100,
) -> dict[str, Any]:
    """Active tools that no search returned (ever, or since `since`: admins)."""
    if since is not None and not caller.is_admin:
        # Which tools no search returned since a moment says when other callers' searches returned them.
        raise PermissionDenied(
            "Only admins may ask which tools no search returned since a time: the answer is made of every caller's "
            "searches; without `since`, the tools no search ever returned",
            caller=caller.id,
        )
    scope = build_scope(resources, caller, since, None, None, default_days=None)
    return {"tools": await analytics.never_found(session, scope, limit=limit)}


@router.get("/timeseries", response_model=TimeseriesResponse)
async def timeseries(session: SessionDep, scope: ScopeDep, bucket: Literal["hour", "day"] = "hour") -> dict[str, Any]:
    """Calls, successes, latency, callers and searches per UTC hour or day."""
    return {"bucket": bucket, "series": await analytics.timeseries(session, scope, bucket)}


@router.get("/callers", response_model=CallersResponse)
async def callers(session: SessionDep, scope: ScopeDep, limit: Limit = 20) -> dict[str, Any]:
    """The callers with the most calls."""
    return {"callers": await analytics.top_callers(session, scope, limit)}


@router.get("/cooccurrence", response_model=CooccurrenceResponse)
async def cooccurrence(
    session: SessionDep, resources: ResourcesDep, scope: ScopeDep, limit: Limit = 50
) -> dict[str, Any]:
    """Pairs of tools called one after the other by the same caller within the configured window."""
    pairs = await analytics.cooccurrence(session, scope, limit=limit)
    return {"window_seconds": resources.settings.learning.cooccurrence_window_seconds, "pairs": pairs}


@router.get("/conversion", response_model=ConversionResponse)
async def conversion(session: SessionDep, scope: ScopeDep) -> dict[str, Any]:
    """How many searches led to a call, and how many calls came from a search."""
    return await analytics.conversion(session, scope)


@router.get("/searches/unanswered", response_model=UnansweredResponse)
async def unanswered(
    session: SessionDep,
    scope: ScopeDep,
    kind: Literal["no_result", "no_call"] = "no_result",
    limit: Limit = 50,
) -> dict[str, Any]:
    """Searches that returned nothing, or that no call followed, grouped by query text."""
    return {"kind": kind, "queries": await analytics.unanswered_searches(session, scope, kind, limit)}
