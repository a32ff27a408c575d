"""The running execution machinery (the `Gateway`): upstream pool, executor, execution log and stored results.

`start_gateway` and `stop_gateway` are the app's start-up and shutdown hooks. Start-up connects every
configured server (the servers file or the demo set, plus the servers added over the API, which the catalog
keeps) and waits up to `execution.startup_wait_seconds` for their first sync. Shutdown drains the calls in
flight, stops the servers and writes every pending execution row. Server management for the `/servers`
routes lives in upstream/service.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from service.catalog.events import publish_tools_changed
from service.catalog.service import sync_server_tools
from service.cluster.state import cluster_state
from service.db.engine import write_bound
from service.db.models import Server
from service.db.spill import spill_location
from service.errors import ToolscoutError, json_pointer
from service.execution.executor import Executor
from service.execution.log import ExecutionLog
from service.execution.results import ResultStore, load_tokenizer
from service.resources import Resources
from service.upstream.children import ChildRegistry
from service.upstream.config import ServerSpec
from service.upstream.demo import prepare_demo_server
from service.upstream.health import Backoff
from service.upstream.pool import UpstreamPool
from service.upstream.registration import check_api_server
from service.upstream.service import configured_servers, stored_specs

logger = logging.getLogger(__name__)

PURGE_INTERVAL_SECONDS = 600.0
LOG_TASK = "execution-log"
PURGE_TASK = "purge-results"


@dataclass
class Gateway:
    """Everything the execution path needs, owned by the app's resources."""

    resources: Resources
    pool: UpstreamPool
    log: ExecutionLog
    results: ResultStore
    executor: Executor


def get_gateway(resources: Resources) -> Gateway:
    """The running gateway of these resources."""
    gateway = resources.gateway
    if gateway is None:
        raise ToolscoutError("the execution gateway is not running (the app's lifespan has not started)")
    return gateway


def build_gateway(resources: Resources) -> Gateway:
    """Construct the gateway (nothing connects yet)."""
    settings = resources.settings

    async def on_tools(spec: ServerSpec, tools: list[dict[str, Any]]) -> Any:
        if not await may_write_catalog(resources, spec, spec.id in pool.adding):
            if (gateway := resources.gateway) is not None:
                gateway.executor.tools.invalidate_server(spec.id)
            return {"writer": False, "listed": len(tools)}  # the writer replica syncs the catalog
        connection = pool.get(spec.id)
        report = await sync_server_tools(
            resources,
            spec.id,
            tools,
            transport=spec.transport,
            config=spec.config(),
            info=connection.server_info if connection else None,
            existing_only=spec.source == "api" and spec.id not in pool.adding,  # checked again in the write
        )
        if (gateway := resources.gateway) is not None:
            gateway.executor.tools.invalidate_server(spec.id)
        if report.created or report.updated or report.removed:
            # MCP front ends re-list (GET /events); a tool held since it came was never shown and is not told of
            publish_tools_changed(resources, spec.id, sorted(report.shown))
        return report

    async def prepare(spec: ServerSpec) -> ServerSpec:
        if spec.source == "api":
            # Checked again at each start: a name may resolve elsewhere now, or the operator tightened the rules.
            await check_api_server(spec, settings.execution, where=json_pointer(("servers", spec.id)))
        return await prepare_demo_server(settings, spec)

    pool = UpstreamPool(
        on_tools=on_tools,
        prepare=prepare,
        backoff=Backoff(settings.execution.reconnect_initial_seconds, settings.execution.reconnect_max_seconds),
        heartbeat_seconds=settings.execution.heartbeat_seconds,
        children=ChildRegistry(settings.data_dir / "children"),
        allowed_hosts=settings.execution.upstream_allowed_hosts,
        egress_allowed_hosts=settings.execution.egress_allowed_hosts,
        max_message_bytes=settings.execution.max_message_bytes,
        max_tools_list_bytes=settings.execution.max_tools_list_bytes,
        max_tools_per_server=settings.execution.max_tools_per_server,
    )
    spill, shared = spill_location(settings.data_dir, settings.db.spill_dir, "executions-spill.jsonl")
    log = ExecutionLog(
        resources.session,
        spill,
        settings.execution.log_durability,
        write_bound(settings.database_url, settings.db.timeout_seconds),
        shared_spill=shared,
    )
    results = ResultStore(resources)
    return Gateway(resources, pool, log, results, Executor(resources, pool, log, results))


async def may_write_catalog(resources: Resources, spec: ServerSpec, adding: bool) -> bool:
    """Whether this replica syncs the server's listing into the catalog: it holds the server's writer lock,
    and an API-added server still exists (a listing arriving after another replica removed it must not bring
    the server back)."""
    writers = cluster_state(resources).writers
    if writers is not None and not await writers.claim(spec.id):
        return False
    if spec.source != "api" or adding:
        return True
    async with resources.session() as session:
        return await session.get(Server, spec.id) is not None


async def start_gateway(resources: Resources) -> None:
    """Start-up hook: the execution log, the result store's housekeeping and every upstream server."""
    settings = resources.settings.execution
    gateway = build_gateway(resources)
    resources.gateway = gateway
    await gateway.log.start()
    resources.supervisor.start(LOG_TASK, gateway.log.run)
    await asyncio.to_thread(load_tokenizer)  # now, not on the first call
    assert gateway.pool.children is not None
    gateway.pool.children.clean_up_after_dead_services()  # a service killed with SIGKILL leaves them behind
    configured = configured_servers(resources.settings)
    for spec in configured + await stored_specs(resources, configured, gateway.pool):
        gateway.pool.add(spec)
    resources.supervisor.start(PURGE_TASK, lambda: _purge_results(gateway, settings.result_ttl_hours))
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
    gateway, resources.gateway = resources.gateway, None
    if gateway is None:
        return
    await gateway.executor.drain(resources.settings.execution.shutdown_grace_seconds)
    await resources.supervisor.stop(PURGE_TASK)
    await gateway.pool.close()
    if gateway.pool.children is not None:
        gateway.pool.children.close()
    # Calls still running past the grace period failed when their server stopped: let them log.
    await gateway.executor.drain(5.0)
    await gateway.log.close(resources.supervisor.task(LOG_TASK))


async def _purge_results(gateway: Gateway, ttl_hours: float) -> None:
    while True:  # errors go to the supervisor (restart with backoff)
        await gateway.results.purge(ttl_hours)
        await asyncio.sleep(PURGE_INTERVAL_SECONDS)
