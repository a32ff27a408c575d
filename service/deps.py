"""Annotated dependency aliases for the routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from service.execution.code_mode.runner import CodeMode, code_mode
from service.execution.runtime import Gateway, get_gateway
from service.policy.callers import Caller
from service.policy.service import require_admin, require_approver, resolve_caller
from service.resources import Resources


async def get_resources(request: Request) -> Resources:
    # async: a plain def would send every request through the thread pool for an attribute read.
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_session(resources: ResourcesDep) -> AsyncIterator[AsyncSession]:
    """One session per request, committed when the route returns and rolled back when it raises."""
    async with resources.session() as session:
        try:
            yield session
            await session.commit()
        except BaseException:
            await session.rollback()
            raise


SessionDep = Annotated[AsyncSession, Depends(get_session)]


# The same callable everywhere, so FastAPI resolves the caller (and charges its rate limit) once a request.
CallerDep = Annotated[Caller, Depends(resolve_caller)]
ApproverDep = Annotated[Caller, Depends(require_approver)]
ToolsAdminDep = Annotated[Caller, Depends(require_admin("Managing tools"))]
ServersAdminDep = Annotated[Caller, Depends(require_admin("Managing upstream servers"))]
KeysAdminDep = Annotated[Caller, Depends(require_admin("Managing API keys"))]


async def gateway_dep(resources: ResourcesDep) -> Gateway:
    return get_gateway(resources)


GatewayDep = Annotated[Gateway, Depends(gateway_dep)]


async def code_mode_dep(resources: ResourcesDep) -> CodeMode:
    return code_mode(resources)


CodeModeDep = Annotated[CodeMode, Depends(code_mode_dep)]
