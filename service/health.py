"""Liveness, readiness, and what answers at the root."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse
from sqlalchemy import text

from service import version
from service.cluster.state import cluster_state, readiness
from service.deps import ResourcesDep

router = APIRouter(tags=["health"])


@router.get("/", response_model=None, responses={303: {"description": "A browser (Accept: text/html): see /console"}})
async def root(request: Request) -> JSONResponse | RedirectResponse:
    """A browser opening the service's address goes to the console; any other client is told what runs here and
    where to look (it was a 404 either way)."""
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse("/console", status_code=303)
    return JSONResponse(
        {
            "service": "toolscout",
            "version": version(),
            "console": "/console",
            "openapi": "/openapi.json",
            "health": "/healthz",
            "ready": "/readyz",
        }
    )


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(resources: ResourcesDep) -> JSONResponse:
    """The database answers and the index is open (with its number of tools when no permissions file restricts
    what callers see); background loops are listed with their state (one waiting to restart after an error makes
    the status "degraded", still ready)."""
    checks: dict[str, str] = {}
    try:
        # Bounded: a stalled database makes the replica "not ready" for the balancer, not a probe left hanging.
        with anyio.fail_after(resources.settings.db.timeout_seconds):
            async with resources.session() as session:
                await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure instead of raising
        checks["database"] = f"error: {exc.__class__.__name__}"
    if resources.index is not None:
        try:
            tools = await resources.run_index(resources.index.count)
            if resources.settings.policy.permissions_file is None:
                # Anyone may ask: under a permissions file the count would tell callers how many tools they
                # may not see (least knowledge). /metrics has it for admins.
                checks["tools"] = str(tools)
            checks["index"] = "ok"
        except Exception as exc:  # noqa: BLE001 - readiness reports any failure instead of raising
            checks["index"] = f"error: {exc.__class__.__name__}"
    else:
        checks["index"] = "not open"
    supervisor = resources.supervisor
    failing = sorted(name for name, status in supervisor.status.items() if status.state == "backoff")
    checks["background"] = "ok" if not failing else "restarting: " + ", ".join(failing)
    cluster = cluster_state(resources)
    checks["redis"] = readiness(cluster)
    ready = checks["database"] == "ok" and checks["index"] == "ok"
    # Redis down is degraded, not unready: limits hold per replica and the catalog is followed by polling.
    degraded = bool(failing) or checks["redis"].startswith("degraded")
    status = ("degraded" if degraded else "ready") if ready else "not ready"
    body: dict[str, object] = {
        "status": status,
        "checks": checks,
        "background": supervisor.report(),
        "replica": cluster.replica_id,
    }
    if (follower := cluster.follower) is not None:
        body["catalog"] = {"followed_seq": follower.watermark, "changes_applied": follower.applied}
    return JSONResponse(body, 200 if ready else 503)
