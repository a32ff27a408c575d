"""The execution gateway of a running service: upstream pool, executor, execution log and stored results.

`start_gateway` and `stop_gateway` are the app's start-up and shutdown hooks. Start-up connects every
configured server (the servers file or the demo set, plus the servers added over the API, which the catalog
keeps) and waits up to `execution.startup_wait_seconds` for their first sync. Shutdown drains the calls in
flight, stops the servers and writes every pending execution row.

Server management for the `/servers` routes lives here too: add, remove, refresh, and the health view.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select

from service.catalog import count_tools, ensure_server, remove_server, sync_server_tools
from service.cluster.changes import SERVER_ADDED, record_change
from service.cluster.state import announce
from service.db.models import Server
from service.demo_servers import prepare_demo_server
from service.errors import Conflict, NotFound, ToolscoutError, UpstreamError
from service.events import publish_tools_changed
from service.execution import Executor
from service.execution_log import ExecutionLog
from service.resources import Resources
from service.results import ResultStore, encoding
from service.servers_config import ServerSpec, configured_servers
from service.upstream import UpstreamConnection, UpstreamPool
from service.upstream_health import Backoff

logger = logging.getLogger(__name__)

EXTRAS_KEY = "gateway"
PURGE_INTERVAL_SECONDS = 600.0
LIVE_TRANSPORTS = ("stdio", "http")


@dataclass
class Gateway:
    """Everything the execution path needs, owned by the app's resources."""

    resources: Resources
    pool: UpstreamPool
    log: ExecutionLog
    results: ResultStore
    executor: Executor
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    adding: set[str] = field(default_factory=set)  # servers being added over the API on this replica


def get_gateway(resources: Resources) -> Gateway:
    """The running gateway of these resources."""
    gateway = resources.extras.get(EXTRAS_KEY)
    if not isinstance(gateway, Gateway):
        raise ToolscoutError("the execution gateway is not running (the app's lifespan has not started)")
    return gateway


def build_gateway(resources: Resources) -> Gateway:
    """Construct the gateway (nothing connects yet)."""
    settings = resources.settings

    async def on_tools(spec: ServerSpec, tools: list[dict[str, Any]]) -> Any:
        gateway = resources.extras.get(EXTRAS_KEY)
        if not await may_write_catalog(resources, spec, gateway is not None and spec.id in gateway.adding):
            if gateway is not None:
                gateway.executor.tools.invalidate_server(spec.id)
            return {"writer": False, "listed": len(tools)}  # the writer replica syncs the catalog
        report = await sync_server_tools(
            resources, spec.id, tools, transport=spec.transport, config=spec.config()
        )
        if (gateway := resources.extras.get(EXTRAS_KEY)) is not None:
            gateway.executor.tools.invalidate_server(spec.id)
        if report.created or report.updated or report.removed:
            publish_tools_changed(resources, spec.id)  # MCP front ends re-list (GET /events)
        return report

    async def prepare(spec: ServerSpec) -> ServerSpec:
        return await prepare_demo_server(settings, spec)

    pool = UpstreamPool(
        on_tools=on_tools,
        prepare=prepare,
        backoff=Backoff(
            settings.execution.reconnect_initial_seconds, settings.execution.reconnect_max_seconds
        ),
        heartbeat_seconds=settings.execution.heartbeat_seconds,
    )
    log = ExecutionLog(resources.session, settings.data_dir / "executions-spill.jsonl")
    results = ResultStore(resources)
    return Gateway(resources, pool, log, results, Executor(resources, pool, log, results))


async def may_write_catalog(resources: Resources, spec: ServerSpec, adding: bool) -> bool:
    """Whether this replica syncs the server's listing into the catalog: it holds the server's writer lock,
    and an API-added server still exists (a listing arriving after another replica removed it must not bring
    the server back)."""
    writers = resources.cluster.writers
    if writers is not None and not await writers.claim(spec.id):
        return False
    if spec.source != "api" or adding:
        return True
    async with resources.session() as session:
        return await session.get(Server, spec.id) is not None


async def _stored_specs(resources: Resources, configured: list[ServerSpec]) -> list[ServerSpec]:
    """Servers added over the API (kept in the catalog); servers that left the servers file are removed."""
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
        elif source in ("file", "demo"):
            logger.info(
                "server %s is no longer configured: removing it and its tools from the catalog", row.id
            )
            await remove_server(resources, row.id)
    return specs


async def start_gateway(resources: Resources) -> None:
    """Start-up hook: the execution log, the result store's housekeeping and every upstream server."""
    settings = resources.settings.execution
    gateway = build_gateway(resources)
    resources.extras[EXTRAS_KEY] = gateway
    await gateway.log.start()
    await asyncio.to_thread(encoding)  # load the tokenizer now, not on the first call
    configured = configured_servers(resources.settings)
    for spec in configured + await _stored_specs(resources, configured):
        gateway.pool.add(spec)
    gateway.tasks.append(asyncio.create_task(_purge_results(gateway, settings.result_ttl_hours)))
    if settings.startup_wait_seconds > 0:
        await gateway.pool.wait_started(settings.startup_wait_seconds)
    for connection in gateway.pool.connections():
        if not connection.ready:
            logger.warning(
                "MCP server %s is not ready yet (%s): %s",
                connection.id,
                connection.health.state,
                connection.health.last_error or "still starting",
            )


async def stop_gateway(resources: Resources) -> None:
    """Shutdown hook: drain the calls in flight, stop the servers, write every pending execution row."""
    gateway = resources.extras.pop(EXTRAS_KEY, None)
    if not isinstance(gateway, Gateway):
        return
    await gateway.executor.drain(resources.settings.execution.shutdown_grace_seconds)
    for task in gateway.tasks:
        task.cancel()
    await asyncio.gather(*gateway.tasks, return_exceptions=True)
    await gateway.pool.close()
    # Calls still running past the grace period failed when their server stopped: let them log.
    await gateway.executor.drain(5.0)
    await gateway.log.close()


async def _purge_results(gateway: Gateway, ttl_hours: float) -> None:
    while True:
        try:
            await gateway.results.purge(ttl_hours)
        except Exception:  # noqa: BLE001 - housekeeping must not die; the next round retries
            logger.exception("purging stored results failed")
        await asyncio.sleep(PURGE_INTERVAL_SECONDS)


# ------------------------------------------------------------------------------------------- /servers


def server_view(
    spec: ServerSpec | None, row: Server | None, connection: UpstreamConnection | None, tools: int
) -> dict[str, Any]:
    """The public shape of a server: configuration (secrets redacted), catalog state and live health."""
    server_id = spec.id if spec else row.id if row else "?"
    view: dict[str, Any] = {
        "id": server_id,
        "transport": spec.transport if spec else row.transport if row else "catalog",
        "source": spec.source if spec else (row.config or {}).get("source", "catalog") if row else "catalog",
        "config": spec.public_config() if spec else {},
        "tools": tools,
        "last_sync_at": row.last_sync_at.isoformat() if row and row.last_sync_at else None,
    }
    if connection is not None:
        health = connection.health.as_dict()
        view["health"] = health
        view["state"] = health["state"]
        view["last_sync_report"] = connection.last_report
    else:
        view["health"] = None
        view["state"] = "catalog" if view["transport"] == "catalog" else "stopped"
        view["last_sync_report"] = None
    return view


async def list_servers(gateway: Gateway) -> list[dict[str, Any]]:
    """Every server: the live connections and the catalog's rows."""
    async with gateway.resources.session() as session:
        rows = {row.id: row for row in (await session.scalars(select(Server))).all()}
        counts = await count_tools(session)
    ids = sorted(set(rows) | {c.id for c in gateway.pool.connections()})
    views = []
    for server_id in ids:
        connection = gateway.pool.get(server_id)
        views.append(
            server_view(
                connection.spec if connection else None,
                rows.get(server_id),
                connection,
                counts.get(server_id, 0),
            )
        )
    return views


async def get_server(gateway: Gateway, server_id: str) -> dict[str, Any]:
    """One server's view."""
    async with gateway.resources.session() as session:
        row = await session.get(Server, server_id)
        counts = await count_tools(session)
    connection = gateway.pool.get(server_id)
    if row is None and connection is None:
        raise NotFound(f"No server named {server_id!r}", server=server_id)
    return server_view(connection.spec if connection else None, row, connection, counts.get(server_id, 0))


async def add_server(gateway: Gateway, spec: ServerSpec, wait_seconds: float) -> dict[str, Any]:
    """Connect a new server and sync its tools. A server whose first connection fails is not kept."""
    async with gateway.resources.session() as session:
        existing = await session.get(Server, spec.id)
    if existing is not None:
        raise Conflict(f"A server named {spec.id!r} already exists", server=spec.id)
    gateway.adding.add(spec.id)
    try:
        connection = gateway.pool.add(spec)
        await connection.wait_started(wait_seconds)
        if not connection.ready and connection.health.state == "backoff":
            error = connection.health.last_error or "the first connection failed"
            await gateway.pool.remove(spec.id)
            raise UpstreamError(f"Could not connect to MCP server {spec.id!r}: {error}", server=spec.id)
        await _announce_server(gateway.resources, spec)
    finally:
        gateway.adding.discard(spec.id)
    return await get_server(gateway, spec.id)


async def _announce_server(resources: Resources, spec: ServerSpec) -> None:
    """Record the new server in the change sequence (its row exists once the first sync ran), so that the
    other replicas connect to it too."""
    async with resources.session() as session:
        await ensure_server(session, spec.id, spec.transport, spec.config())
        record_change(session, SERVER_ADDED, [], server=spec.id, origin=resources.cluster.replica_id)
        await session.commit()
    await announce(resources)


async def delete_server(gateway: Gateway, server_id: str) -> dict[str, Any]:
    """Stop a server and remove it and its tools from the catalog."""
    connected = server_id in gateway.pool
    await gateway.pool.remove(server_id)
    gateway.executor.tools.invalidate_server(server_id)
    if gateway.resources.cluster.writers is not None:
        await gateway.resources.cluster.writers.release(server_id)
    try:
        removed = await remove_server(gateway.resources, server_id)
    except NotFound:
        if not connected:
            raise
        removed = []
    return {"id": server_id, "removed_tools": removed}


async def refresh_server(gateway: Gateway, server_id: str, wait_seconds: float) -> dict[str, Any]:
    """List a server's tools again and sync the catalog (a server in backoff reconnects at once)."""
    connection = gateway.pool.get(server_id)
    if connection is None:
        await get_server(gateway, server_id)  # NotFound for an unknown id
        raise UpstreamError(
            f"Server {server_id!r} has no connection to refresh (a catalog-only registration)",
            server=server_id,
        )
    report = await connection.refresh(wait_seconds)
    view = await get_server(gateway, server_id)
    view["sync"] = report
    return view
