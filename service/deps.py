"""Annotated dependency aliases for the routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from service.auth import Caller, resolve_caller
from service.observability.logging import note
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


async def get_caller(request: Request) -> Caller:
    caller = await resolve_caller(request)
    note(caller=caller.id)  # the request's log line names its caller
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]
