"""`GET /healthz` and `GET /readyz` of the MCP front end over HTTP, answered before its key: a load balancer in
front of several front ends probes them as it probes the REST API (they were a 401 with a key, a 404 without).
Liveness says the process answers; readiness, that the REST API behind it says it is ready. Neither says more than
the REST API's own probes do to a client without a key."""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from service.mcp.api import ApiError, ApiUnavailable, ToolscoutApi


class HealthProbes:
    def __init__(self, app: ASGIApp, api: Callable[[], ToolscoutApi]) -> None:
        self.app = app
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path") if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") else None
        if path == "/healthz":
            await _answer(send, 200, {"status": "ok"})
        elif path == "/readyz":
            try:
                await self.api().ready()
            except ApiUnavailable:  # not its address or error: a probe needs no key
                await _answer(send, 503, {"status": "not ready", "detail": "the REST API does not answer"})
            except ApiError:
                await _answer(send, 503, {"status": "not ready", "detail": "the REST API is not ready"})
            else:
                await _answer(send, 200, {"status": "ready"})
        else:
            await self.app(scope, receive, send)


async def _answer(send: Send, status: int, body: dict[str, str]) -> None:
    encoded = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": encoded})
