"""GET /metrics: the Prometheus text format, for admins and keys with the `metrics` role.

The scrape-time values (upstream health, catalog and index size, caches, the execution and search logs' queues) are read
here, from the typed `Resources` attributes and the catalog, so the rest of observability/ imports no domain."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from service.catalog.lookup import count_tools
from service.deps import CallerDep, ResourcesDep
from service.errors import PermissionDenied
from service.observability.metrics import Snapshot
from service.resources import Resources

router = APIRouter(tags=["observability"])
METRICS_ROLE = "metrics"
CATALOG_COUNT_SECONDS = 2.0


@router.get("/metrics", response_class=Response)
async def metrics(resources: ResourcesDep, caller: CallerDep) -> Response:
    """Request, search and execution metrics, upstream health, catalog and index size, caches, log queue."""
    if not (caller.is_admin or METRICS_ROLE in caller.roles):
        raise PermissionDenied("Reading /metrics needs the admin or the metrics role", caller=caller.id)
    obs = resources.observability
    assert obs is not None, "install_observability sets it when the app is built"
    obs.metrics.snapshot.snapshot = await take_snapshot(resources)
    return Response(obs.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def take_snapshot(resources: Resources) -> Snapshot:
    """Read the scrape-time values: upstream health, catalog and index size, caches, the log queue."""
    snap = Snapshot(cache_hits=resources.embedder.hits, cache_misses=resources.embedder.misses)
    gateway = resources.gateway
    if gateway is not None:
        for connection in gateway.pool.connections():
            health = connection.health
            snap.upstream.append(
                {"id": connection.id, "state": health.state, "restarts": health.restarts, "in_flight": health.in_flight}
            )
        snap.log_pending, snap.log_written, snap.log_spilled = (
            gateway.log.pending,
            gateway.log.written,
            gateway.log.spilled,
        )
    if resources.search_log is not None:
        snap.search_log_pending, snap.search_log_dropped = resources.search_log.pending, resources.search_log.dropped
    if resources.index is not None:
        snap.index_points = int(await resources.run_index(resources.index.count))
    if resources.sessionmaker is not None:
        # A scrape answers while the database does not (that is when it is wanted): the catalog's count is left out
        # and toolscout_database_up says 0, after at most CATALOG_COUNT_SECONDS.
        try:
            with anyio.fail_after(min(CATALOG_COUNT_SECONDS, resources.settings.db.timeout_seconds)):
                async with resources.session() as session:
                    snap.catalog_tools = await count_tools(session)
            snap.database_up = True
        except (SQLAlchemyError, OSError, TimeoutError):
            snap.database_up = False
    return snap
