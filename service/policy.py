"""Who may use what. Boundary used by retrieval and execution; filled in by the policy work (issue 5)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from indexer.index.base import SearchFilter
from service.auth import Caller
from service.resources import Resources


def permission_filter(resources: Resources, caller: Caller, base: SearchFilter) -> SearchFilter:
    """The search filter of this caller: `base` (servers, tags) narrowed to the tools the caller may use."""
    return base


async def authorize_call(
    resources: Resources,
    session: AsyncSession,
    caller: Caller,
    tool: Any,
    arguments: dict[str, Any],
    approval_id: str | None,
) -> None:
    """Raise PermissionDenied / ApprovalRequired / RateLimited when the caller may not make this call."""
    return None
