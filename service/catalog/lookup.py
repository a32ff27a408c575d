"""The catalog's read side: find a tool (a missing or hidden one is the same 404), list a page, count per server."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import anyio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.closest import close_names
from indexer.tools import MAX_NAME_CHARS
from service.db.among import among
from service.db.models import Tool, active, held_for_review
from service.errors import HiddenTool, NotFound
from service.policy.callers import Caller
from service.policy.service import visible_names
from service.resources import Resources

# How many unknown names of one batch or script get their closest names: each compared up to 500 names in Python
# (55 ms at 50k tools; through the close-name index now, some 10 ms at 100k), and a batch of 100 misspelt names held
# the event loop 6.0 s, a script of 50 calls 3.1 s.
SUGGESTED_NAMES_PER_REQUEST = 3
_suggestions_left: ContextVar[list[int] | None] = ContextVar("suggestions_left", default=None)


@contextmanager
def few_suggestions(count: int = SUGGESTED_NAMES_PER_REQUEST) -> Iterator[None]:
    """Within the block (and the tasks it starts), only the first `count` unknown names get closest names."""
    token = _suggestions_left.set([count])
    try:
        yield
    finally:
        _suggestions_left.reset(token)


def _may_suggest() -> bool:
    left = _suggestions_left.get()
    if left is None:
        return True
    left[0] -= 1
    return left[0] >= 0


def tool_not_found(
    name: str, resources: Resources | None, allowed: frozenset[str] | None = None, *, hidden: bool = False
) -> NotFound:
    """The 404 of a missing tool, naming the closest names among those the caller may use (`allowed`).

    A tool the caller may not use gets the same answer (`hidden`), so neither the status nor the
    suggestions tell it which names exist."""
    closest: list[str] = []
    if len(name) > MAX_NAME_CHARS:  # no tool has such a name: neither matched nor echoed in full
        name = name[:MAX_NAME_CHARS] + "..."
    elif resources is not None and resources.retriever is not None and _may_suggest():
        closest = resources.retriever.directory.closest(name, allowed=allowed)
    hint = f"; closest: {', '.join(closest)}" if closest else ""
    error = HiddenTool if hidden else NotFound
    return error(f"No tool named {name!r}{hint}", tool=name, closest=closest)


def server_not_found(server_id: str, known: Iterable[str]) -> NotFound:
    """The 404 of a missing server, naming the closest of the `known` servers: only those the caller may see, so a
    server it may not use is answered, suggestions and all, like one that does not exist."""
    closest: list[str] = []
    if len(server_id) > MAX_NAME_CHARS:
        server_id = server_id[:MAX_NAME_CHARS] + "..."
    else:  # spelt another way, a typo away or made of the same words, by the rules of a tool's closest names
        closest = close_names(server_id, {known_id: known_id for known_id in known if known_id != server_id})
    hint = f"; closest: {', '.join(closest)}" if closest else ""
    return NotFound(f"No server named {server_id!r}{hint}", server=server_id, closest=closest)


async def unknown_server(server_id: str, known: Iterable[str]) -> NotFound:
    """`server_not_found` in a worker thread: among 4,000 servers it compares for 26 ms, off the event loop here."""
    return await anyio.to_thread.run_sync(server_not_found, server_id, list(known))


async def find_tool(
    session: AsyncSession,
    name: str,
    resources: Resources | None = None,
    allowed: frozenset[str] | None = None,
    *,
    held: bool = False,
) -> Tool:
    """The active tool with this qualified name; NotFound names the closest ones (of `allowed`, when given). A tool
    held for review is missing too, unless `held` (an admin's view of it)."""
    row = await session.get(Tool, name)
    if row is not None and not row.deprecated and (held or row.held_reason is None):
        return row
    raise tool_not_found(name, resources, allowed)


async def list_tools(
    session: AsyncSession,
    *,
    server: str | None = None,
    tag: str | None = None,
    limit: int = 100,
    offset: int = 0,
    allowed: frozenset[str] | None = None,
    held: bool = False,
) -> tuple[list[Tool], int]:
    """A page of active tools (`held`: of the tools held for review instead), ordered by qualified name, and the
    total. Only the page's rows are read (reading every row of a 100k-tool catalog cost 2.5 s of the event loop a
    request); with a tag, whose column is a JSON list, the names and tags of the others are."""
    terms = [held_for_review() if held else active()]
    if server:
        terms.append(Tool.server_id == server)
    if allowed is not None:
        terms.append(among(Tool.qualified_name, allowed))
    if tag:
        tagged = await session.execute(
            select(Tool.qualified_name, Tool.tags).where(*terms).order_by(Tool.qualified_name)
        )
        names = [name for name, tags in tagged if tag in (tags or [])]
        page = names[offset : offset + limit]
        terms, total = [Tool.qualified_name.in_(page)], len(names)
    else:
        total = int(await session.scalar(select(func.count()).select_from(Tool).where(*terms)) or 0)
        if offset >= total:  # past the end: nothing to read (and an offset past 2**63 is no SQL integer)
            return [], total
    query = select(Tool).where(*terms).order_by(Tool.qualified_name)
    rows = (await session.scalars(query if tag else query.offset(offset).limit(limit))).all()
    return list(rows), total


async def list_visible_tools(
    session: AsyncSession, resources: Resources, caller: Caller, **page: Any
) -> tuple[list[Tool], int]:
    """A page of the active tools this caller may use (see list_tools for the page arguments)."""
    return await list_tools(session, allowed=visible_names(resources, caller), **page)


async def find_visible_tool(session: AsyncSession, resources: Resources, caller: Caller, name: str) -> Tool:
    """The active tool with this name if the caller may use it; a hidden tool gets a missing tool's answer."""
    visible = visible_names(resources, caller)
    if visible is not None and name not in visible:
        raise tool_not_found(name, resources, visible, hidden=True)  # the same 404 as a missing tool
    return await find_tool(session, name, resources, visible)


async def count_tools(session: AsyncSession, server_id: str | None = None) -> dict[str, int]:
    """Active tools per server (not those held for review), of every server or of one."""
    one = [Tool.server_id == server_id] if server_id is not None else []
    rows = await session.execute(select(Tool.server_id, func.count()).where(active(), *one).group_by(Tool.server_id))
    return {server: count for server, count in rows}
