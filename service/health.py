"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.cluster.state import cluster_state, readiness
from service.deps import ResourcesDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(resources: ResourcesDep) -> JSONResponse:
    """The database answers and the index is open."""
    checks: dict[str, str] = {}
    try:
        async with resources.session() as session:
            await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure instead of raising
        checks["database"] = f"error: {exc.__class__.__name__}"
    if resources.index is not None:
        checks["index"] = "ok"
        checks["tools"] = str(await resources.run_index(resources.index.count))
    else:
        checks["index"] = "not open"
    cluster = cluster_state(resources)
    checks["redis"] = readiness(cluster)
    ready = checks["database"] == "ok" and checks["index"] == "ok"
    # Redis down is degraded, not unready: limits hold per replica and the catalog is followed by polling.
    status = "not ready" if not ready else "degraded" if checks["redis"].startswith("degraded") else "ready"
    body: dict[str, object] = {"status": status, "checks": checks, "replica": cluster.replica_id}
    if (follower := cluster.follower) is not None:
        body["catalog"] = {"followed_seq": follower.watermark, "changes_applied": follower.applied}
    return JSONResponse(body, 200 if ready else 503)
