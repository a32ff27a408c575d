"""Removing tools and servers from the catalog of record, then from this replica's index (the others follow)."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.catalog.events import publish_tools_changed, shown_tools
from service.catalog.lookup import find_tool, unknown_server
from service.catalog.server_vectors import refresh_servers
from service.catalog.service import unindex
from service.cluster.changes import SERVER_REMOVED, TOOLS, record_change
from service.cluster.state import announce, cluster_state
from service.db.engine import CATALOG_WRITE_LOCK_KEY, take_turn
from service.db.models import Server, Tool
from service.resources import Resources

CATALOG_ONLY = "catalog"  # a server's transport when it was only registered with its tools (no connection)


async def delete_tool(resources: Resources, name: str) -> None:
    """Remove a tool from the catalog and the index."""
    async with resources.index_lock:
        async with resources.session() as session:
            await take_turn(session, CATALOG_WRITE_LOCK_KEY)
            row = await find_tool(session, name, resources, held=True)
            server_id = row.server_id
            await session.delete(row)
            await _drop_if_emptied(session, server_id)
            record_change(session, TOOLS, [name], server=server_id, origin=cluster_state(resources).replica_id)
            await session.commit()
        shown = shown_tools(resources, [name])
        await unindex(resources, [name])
        await refresh_servers(resources, [server_id])
    publish_tools_changed(resources, server_id, shown)
    await announce(resources)


async def _drop_if_emptied(session: AsyncSession, server_id: str) -> None:
    """A catalog-only server goes with its last tool (held ones count): it was only their registration, and
    GET /servers and the MCP `status` would show it with none. A server with a transport stays (it still runs)."""
    await session.flush()
    server = await session.get(Server, server_id)
    if server is not None and server.transport == CATALOG_ONLY:
        if await session.scalar(select(Tool.qualified_name).where(Tool.server_id == server_id).limit(1)) is None:
            await session.delete(server)


async def remove_server(resources: Resources, server_id: str) -> list[str]:
    """Remove a server and its tools from the catalog and the index."""
    async with resources.index_lock:
        async with resources.session() as session:
            await take_turn(session, CATALOG_WRITE_LOCK_KEY)
            server = await session.get(Server, server_id)
            if server is None:
                raise await unknown_server(server_id, (await session.scalars(select(Server.id))).all())
            names = list((await session.scalars(select(Tool.qualified_name).where(Tool.server_id == server_id))).all())
            await session.execute(delete(Tool).where(Tool.server_id == server_id))
            await session.delete(server)
            record_change(session, SERVER_REMOVED, names, server=server_id, origin=cluster_state(resources).replica_id)
            await session.commit()
        await unindex(resources, names)
        await refresh_servers(resources, [server_id])
    publish_tools_changed(resources, server_id)
    await announce(resources)
    return names
