"""Upstream servers across replicas: a server added on one replica is connected on every replica (each keeps
its own session to call it), a removed one is stopped everywhere, and a server whose writer died gets a new
writer. Hooks of the catalog follower, installed at start-up after the gateway."""

from __future__ import annotations

import asyncio
import logging
import time

from pydantic import ValidationError
from sqlalchemy import select

from service.cluster.state import cluster_state
from service.db.models import Server
from service.execution.runtime import Gateway, get_gateway
from service.resources import Resources
from service.upstream.config import ServerSpec
from service.upstream.pool import LIVE_TRANSPORTS

logger = logging.getLogger(__name__)


def _spec(row: Server) -> ServerSpec | None:
    try:
        return ServerSpec.model_validate(row.config)
    except ValidationError as exc:
        logger.error("server %s: stored configuration is not valid (%s); not started", row.id, exc)
        return None


async def connect_added(gateway: Gateway, server_id: str) -> None:
    """Another replica added this server over the API: connect to it here too."""
    if server_id in gateway.pool:
        return
    async with gateway.resources.session() as session:
        row = await session.get(Server, server_id)
    if row is None or row.transport not in LIVE_TRANSPORTS:
        return
    gateway.pool.runnable.add(server_id)  # `stopped` here until it runs (or for good: its configuration is not valid)
    spec = _spec(row)
    if spec is not None and server_id not in gateway.pool:
        logger.info("server %s was added on another replica: connecting", server_id)
        gateway.pool.add(spec)


async def stop_removed(gateway: Gateway, server_id: str) -> None:
    """Another replica removed this server: stop its connection here and forget its cached tools."""
    if server_id in gateway.pool:
        logger.info("server %s was removed on another replica: stopping it", server_id)
    await gateway.pool.remove(server_id)  # and forgets it when it never ran here
    gateway.executor.tools.invalidate_server(server_id)
    writers = cluster_state(gateway.resources).writers
    if writers is not None:
        await writers.release(server_id)


async def compare_servers(gateway: Gateway) -> None:
    """Full catch-up: connect the API-added servers the catalog holds, stop the ones it no longer holds."""
    async with gateway.resources.session() as session:
        rows = {
            row.id: row
            for row in (await session.scalars(select(Server).where(Server.transport.in_(LIVE_TRANSPORTS)))).all()
        }
    for server_id, row in rows.items():
        if (row.config or {}).get("source") == "api" and server_id not in gateway.pool:
            await connect_added(gateway, server_id)
    for connection in gateway.pool.connections():
        if connection.spec.source == "api" and connection.id not in rows and connection.id not in gateway.pool.adding:
            await stop_removed(gateway, connection.id)
    # One removed while this replica missed it, which never ran here, is forgotten too.
    gateway.pool.runnable &= set(rows) | {connection.id for connection in gateway.pool.connections()}


async def claim_orphans(gateway: Gateway) -> None:
    """Become the writer of the servers nobody writes (their writer stopped) and sync their tools now."""
    writers = cluster_state(gateway.resources).writers
    if writers is None or not writers.shared:
        return
    held = writers.held
    for connection in gateway.pool.connections():
        if connection.id not in held and connection.ready and await writers.claim(connection.id):
            task = asyncio.create_task(connection.refresh(gateway.resources.settings.execution.timeout_seconds))
            task.add_done_callback(_log_refresh)


def _log_refresh(task: asyncio.Task[object]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("syncing a newly claimed server failed: %r", task.exception())


async def start_server_following(resources: Resources) -> None:
    """Start-up hook (after the gateway): connect the follower's server hooks."""
    follower = cluster_state(resources).follower
    if follower is None:
        return
    gateway = get_gateway(resources)
    retry = resources.settings.cluster.lock_retry_seconds
    last_claim = 0.0

    async def added(server_id: str) -> None:
        await connect_added(gateway, server_id)

    async def removed(server_id: str) -> None:
        await stop_removed(gateway, server_id)

    async def tools_changed(server_id: str) -> None:
        gateway.executor.tools.invalidate_server(server_id)

    async def full() -> None:
        await compare_servers(gateway)

    async def each_round() -> None:
        nonlocal last_claim
        if time.monotonic() - last_claim >= retry:
            last_claim = time.monotonic()
            await claim_orphans(gateway)

    follower.on_server_added.append(added)
    follower.on_server_removed.append(removed)
    follower.on_tools_changed.append(tools_changed)
    follower.on_full.append(full)
    follower.on_round.append(each_round)


async def stop_server_following(resources: Resources) -> None:
    """Shutdown hook (runs before the gateway stops): the follower calls no gateway hook any more."""
    if cluster_state(resources).follower is not None:
        await cluster_state(resources).follower.close()
