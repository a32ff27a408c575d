"""GET /metrics: the Prometheus text format, for admins and keys with the `metrics` role."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.deps import CallerDep, ResourcesDep
from service.errors import PermissionDenied
from service.observability.metrics import take_snapshot

router = APIRouter(tags=["observability"])
METRICS_ROLE = "metrics"


@router.get("/metrics", response_class=Response)
async def metrics(resources: ResourcesDep, caller: CallerDep) -> Response:
    """Request, search and execution metrics, upstream health, catalog and index size, caches, log queue."""
    if not (caller.is_admin or METRICS_ROLE in caller.roles):
        raise PermissionDenied("Reading /metrics needs the admin or the metrics role", caller=caller.id)
    obs = resources.extras["observability"]
    obs.metrics.snapshot.snapshot = await take_snapshot(resources)
    return Response(obs.metrics.render(), media_type=CONTENT_TYPE_LATEST)
