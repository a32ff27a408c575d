"""An admin's review of held tools (service/catalog/holds.py): their view and their release, which indexes them;
and of a server's held info (service/catalog/server_info.py), whose release reaches ranking."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from service.catalog.events import publish_tools_changed
from service.catalog.holds import held_view, release
from service.catalog.lookup import tool_not_found
from service.catalog.server_vectors import refresh_servers
from service.catalog.service import index_definitions, to_definition, tool_view
from service.cluster.changes import TOOLS, record_change
from service.cluster.state import announce, cluster_state
from service.cluster.vectors import embedder_id, save_vectors, vectors_for
from service.db.engine import CATALOG_WRITE_LOCK_KEY, take_turn
from service.db.models import Server, Tool, utcnow
from service.errors import Conflict, NotFound
from service.resources import Resources

LISTED_TRANSPORTS = ("stdio", "http")  # the servers whose own listings are trusted on first use


def admin_view(row: Tool) -> dict[str, Any]:
    """A tool as an admin reviewing holds sees it: the public view and `held` (None when it is not held)."""
    return {**tool_view(row), "held": held_view(row) if row.held_reason is not None else None}


async def approve_tool(resources: Resources, name: str) -> dict[str, Any]:
    """Release a held tool: its definition is trusted and indexed; NotFound for no such tool, Conflict for one that
    is not held."""
    async with resources.index_lock:
        async with resources.session() as session:
            await take_turn(session, CATALOG_WRITE_LOCK_KEY)  # an approval on another replica: this one is a 409
            row = await session.get(Tool, name)
            if row is None or row.deprecated:
                raise tool_not_found(name, resources)
            if row.held_reason is None:
                raise Conflict(f"Tool {name!r} is not held for review: there is nothing to approve", tool=name)
            server = await session.get(Server, row.server_id)
            release(row, utcnow(), listed=server is not None and server.transport in LISTED_TRANSPORTS)
            record_change(session, TOOLS, [name], server=row.server_id, origin=cluster_state(resources).replica_id)
            tool, view = to_definition(row), admin_view(row)
            await session.commit()
        vectors, new = await vectors_for(resources, [tool])
        if new:
            async with resources.session() as session:
                await save_vectors(session, new, embedder_id(resources.embedder))
                await session.commit()
        await index_definitions(resources, [tool], vectors)
    publish_tools_changed(resources, tool.server, [name])  # MCP front ends re-list (GET /events)
    await announce(resources)
    return view


async def held_server_infos(resources: Resources) -> list[dict[str, Any]]:
    """The servers whose changed info is held for review: the server id and the hold, by id."""
    async with resources.session() as session:
        rows = await session.scalars(select(Server).where(Server.held_info.is_not(None)).order_by(Server.id))
        return [{"server": row.id, **(row.held_info or {})} for row in rows]


async def approve_info(resources: Resources, server_id: str) -> dict[str, Any]:
    """Take a server's held info: ranking uses it from now on. NotFound for no such server, Conflict for one
    whose info is not held."""
    async with resources.index_lock:
        async with resources.session() as session:
            await take_turn(session, CATALOG_WRITE_LOCK_KEY)
            row = await session.get(Server, server_id)
            if row is None:
                raise NotFound(f"No server named {server_id!r}", server=server_id)
            if row.held_info is None:
                problem = f"Server {server_id!r} has no info held for review: nothing to approve"
                raise Conflict(problem, server=server_id)
            row.info, row.held_info = row.held_info["info"], None
            record_change(session, TOOLS, [], server=server_id, origin=cluster_state(resources).replica_id)
            await session.commit()
        await refresh_servers(resources, [server_id])
    await announce(resources)
    return {"server": server_id, "info": row.info, "held_info": None}
