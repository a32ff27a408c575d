"""The upstream servers of a running service: which ones run, and their management for the `/servers` routes.

`configured_servers` (the servers file, or the demo set) and `stored_specs` (the servers added over the API,
which the catalog keeps) are what the execution gateway starts with; the rest adds, removes and refreshes
servers on the pool and shapes their public view (configuration with secrets redacted, catalog state, health).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select

from service.catalog.holds import held_by_server
from service.catalog.lookup import count_tools, unknown_server
from service.catalog.removal import remove_server
from service.catalog.service import ensure_server
from service.cluster.changes import SERVER_ADDED, record_change
from service.cluster.state import announce, cluster_state
from service.db.among import among
from service.db.engine import SERVER_ADD_LOCKS, lock_key, one_at_a_time
from service.db.models import Server, as_utc
from service.errors import Conflict, NotFound, UpstreamError
from service.resources import Resources
from service.settings import Settings
from service.upstream.config import ServerSpec, load_servers_file
from service.upstream.connection import UpstreamConnection
from service.upstream.demo import demo_servers
from service.upstream.pool import LIVE_TRANSPORTS, UpstreamPool, state_without_connection

logger = logging.getLogger(__name__)


def configured_servers(settings: Settings) -> list[ServerSpec]:
    """The servers file when one is set, otherwise the demo servers when they are enabled."""
    if settings.execution.servers_file is not None:
        return load_servers_file(settings.execution.servers_file)
    if settings.execution.demo_servers:
        return demo_servers(settings)
    return []


async def stored_specs(resources: Resources, configured: list[ServerSpec], pool: UpstreamPool) -> list[ServerSpec]:
    """Servers added over the API (kept in the catalog); servers that left the servers file are removed. One whose
    stored configuration is not valid is not started, and is `stopped` in the pool's eyes (not `catalog`)."""
    wanted = {spec.id for spec in configured}
    async with resources.session() as session:
        rows = (await session.scalars(select(Server).where(Server.transport.in_(LIVE_TRANSPORTS)))).all()
    specs = []
    for row in rows:
        source = (row.config or {}).get("source")
        if row.id in wanted:
            continue
        if source == "api":
            try:
                specs.append(ServerSpec.model_validate(row.config))
            except ValidationError as exc:
                logger.error("server %s: stored configuration is not valid (%s); not started", row.id, exc)
                pool.runnable.add(row.id)
        elif source in ("file", "demo"):
            logger.info("server %s is no longer configured: removing it and its tools from the catalog", row.id)
            await remove_server(resources, row.id)
    return specs


def server_view(
    spec: ServerSpec | None,
    row: Server | None,
    connection: UpstreamConnection | None,
    tools: int,
    held: list[dict[str, Any]] | None = None,
    held_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The public shape of a server: configuration (secrets redacted), catalog state and live health."""
    server_id = spec.id if spec else row.id if row else "?"
    view: dict[str, Any] = {
        "id": server_id,
        "transport": spec.transport if spec else row.transport if row else "catalog",
        "source": spec.source if spec else (row.config or {}).get("source", "catalog") if row else "catalog",
        "config": spec.public_config() if spec else {},
        "tools": tools,
        "held_tools": held or [],  # held for an admin's review (service/catalog/holds.py): name and reason
        "held_info": held_info,  # its changed info held for review (service/catalog/server_info.py)
        # SQLite hands it back naive: it read 2026-12-07T16:54:53.239427, with no zone, beside health's +00:00.
        "last_sync_at": as_utc(row.last_sync_at).isoformat() if row and row.last_sync_at else None,
    }
    if connection is not None:
        health = connection.health.as_dict()
        view["health"] = health
        view["state"] = health["state"]
        view["last_sync_report"] = connection.last_report
    else:
        view["health"] = None
        view["state"] = state_without_connection(view["transport"] in LIVE_TRANSPORTS)
        view["last_sync_report"] = None
    return view


async def list_servers(
    resources: Resources, pool: UpstreamPool, only: frozenset[str] | None = None
) -> list[dict[str, Any]]:
    """Every server: the live connections and the catalog's rows. `only`: these servers' states alone, without
    tool counts or held tools (a restricted caller's view, which costs what its own servers cost: every server's
    view took a dev's GET /servers 161 ms among 4,000 servers it may not use, 9 ms without them)."""
    counts: dict[str, int] = {}
    held: dict[str, list[dict[str, Any]]] = {}
    async with resources.session() as session:
        chosen = select(Server) if only is None else select(Server).where(among(Server.id, only))
        rows = {row.id: row for row in (await session.scalars(chosen)).all()}
        if only is None:
            counts, held = await count_tools(session), await held_by_server(session)
    live = {c.id for c in pool.connections()} if only is None else {s for s in only if pool.get(s) is not None}
    ids = sorted(set(rows) | live)
    views = []
    for server_id in ids:
        connection = pool.get(server_id)
        views.append(
            server_view(
                connection.spec if connection else None,
                rows.get(server_id),
                connection,
                counts.get(server_id, 0),
                held.get(server_id),
                rows[server_id].held_info if only is None and server_id in rows else None,
            )
        )
    return views


async def get_server(
    resources: Resources,
    pool: UpstreamPool,
    server_id: str,
    counted: bool = True,
    seen: frozenset[str] | None = None,
) -> dict[str, Any]:
    """One server's view (without `counted`, no tool count or held tools: see list_servers). A missing one's 404
    names the closest servers (of `seen` when given: those the caller may see)."""
    async with resources.session() as session:
        row = await session.get(Server, server_id)
        connection = pool.get(server_id)
        if row is None and connection is None:
            known = set((await session.scalars(select(Server.id))).all()) | {c.id for c in pool.connections()}
            raise await unknown_server(server_id, known if seen is None else known & seen)
        counts = await count_tools(session, server_id) if counted else {}
        held = await held_by_server(session, server_id) if counted else {}
    spec = connection.spec if connection else None
    held_info = row.held_info if counted and row is not None else None
    return server_view(spec, row, connection, counts.get(server_id, 0), held.get(server_id), held_info)


async def add_server(resources: Resources, pool: UpstreamPool, spec: ServerSpec, wait_seconds: float) -> dict[str, Any]:
    """Connect a new server and sync its tools. A server whose first connection fails is not kept.

    Adds of one id take turns across replicas (the row exists only once the first sync ran, so the check alone let
    two replicas both add it, the later one's config overwriting the earlier's): the later one is a 409."""
    assert resources.engine is not None
    async with one_at_a_time(resources.engine, lock_key(SERVER_ADD_LOCKS, spec.id)):
        async with resources.session() as session:
            existing = await session.get(Server, spec.id)
        if existing is not None or spec.id in pool.adding:
            raise Conflict(f"A server named {spec.id!r} already exists", server=spec.id)
        pool.adding.add(spec.id)
        try:
            connection = pool.add(spec)
            await connection.wait_started(wait_seconds)
            if not connection.ready and connection.health.state == "backoff":
                error = connection.health.last_error or "the first connection failed"
                await pool.remove(spec.id)
                raise UpstreamError(f"Could not connect to MCP server {spec.id!r}: {error}", server=spec.id)
            await _announce_server(resources, spec)
        finally:
            pool.adding.discard(spec.id)
    return await get_server(resources, pool, spec.id)


async def _announce_server(resources: Resources, spec: ServerSpec) -> None:
    """Record the new server in the change sequence (its row exists once the first sync ran), so that the
    other replicas connect to it too."""
    async with resources.session() as session:
        await ensure_server(session, spec.id, spec.transport, spec.config())
        record_change(session, SERVER_ADDED, [], server=spec.id, origin=cluster_state(resources).replica_id)
        await session.commit()
    await announce(resources)


async def delete_server(
    resources: Resources, pool: UpstreamPool, server_id: str, forget: Callable[[str], None]
) -> dict[str, Any]:
    """Stop a server and remove it and its tools from the catalog."""
    connected = server_id in pool
    await pool.remove(server_id)
    forget(server_id)  # the executor's cached rows of this server
    if (writers := cluster_state(resources).writers) is not None:
        await writers.release(server_id)
    try:
        removed = await remove_server(resources, server_id)
    except NotFound:
        if not connected:
            raise
        removed = []
    return {"id": server_id, "removed_tools": removed}


async def refresh_server(
    resources: Resources, pool: UpstreamPool, server_id: str, wait_seconds: float
) -> dict[str, Any]:
    """List a server's tools again and sync the catalog (a server in backoff reconnects at once)."""
    connection = pool.get(server_id)
    if connection is None:
        await get_server(resources, pool, server_id)  # NotFound for an unknown id
        raise UpstreamError(
            f"Server {server_id!r} has no connection to refresh (a catalog-only registration)",
            server=server_id,
        )
    report = await connection.refresh(wait_seconds)
    view = await get_server(resources, pool, server_id)
    view["sync"] = report
    return view
