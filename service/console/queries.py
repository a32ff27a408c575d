"""The data the console needs beyond the REST API: the last step of the search funnel."""

from __future__ import annotations

from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import Execution
from service.usage import analytics
from service.usage.rollups import SUCCESS, hour_of
from service.usage.scope import Scope, tool_terms


async def search_funnel(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    """Searches -> searches followed by a call -> searches followed by a successful call.

    The first two come from the rollups; the last counts distinct search ids of successful calls in the
    execution log (indexed by start time and caller), over the same whole-hour window."""
    conversion = await analytics.conversion(session, scope)
    query = select(func.count(distinct(Execution.search_id))).where(
        Execution.search_id.is_not(None), Execution.status.in_(SUCCESS)
    )
    if scope.since is not None:
        query = query.where(Execution.started_at >= hour_of(scope.since))
    if scope.until is not None:
        query = query.where(Execution.started_at < scope.until)
    if scope.caller is not None:
        query = query.where(Execution.caller == scope.caller)
    query = query.where(*tool_terms(Execution.tool, scope))
    successful = int(await session.scalar(query) or 0)
    return {
        "searches": conversion["searches"],
        "followed_by_call": conversion["searches_followed_by_call"],
        "followed_by_success": min(successful, conversion["searches_followed_by_call"]),
        "without_result": conversion["searches_without_result"],
        "calls": conversion["calls"],
        "calls_from_search": conversion["calls_from_search"],
    }
