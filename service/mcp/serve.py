"""Running a front end over stdio or streamable HTTP."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from service.mcp.guard import BearerKeyMiddleware, LocalOnlyMiddleware, PlainRefusalsAsProblems
from service.mcp.health import HealthProbes
from service.mcp.http_sessions import SessionBoundMiddleware, SessionTable
from service.mcp.server import Frontend
from service.security.limits import BodySizeLimitMiddleware
from service.security.openmode import is_loopback
from service.security.proxies import forwarding_options

logger = logging.getLogger(__name__)


async def serve_stdio(frontend: Frontend) -> None:
    """Serve one client on stdin/stdout until it closes the pipe."""
    async with frontend.running(), stdio_server() as (read_stream, write_stream):
        server = frontend.server
        await server.run(read_stream, write_stream, server.create_initialization_options())


def rebinding_protection(host: str) -> TransportSecuritySettings | None:
    """The SDK's Host and Origin checks for a front end bound to any loopback address (the SDK turns them on for
    127.0.0.1, localhost and ::1 only: bound to 127.0.0.2, a page whose name rebinds there called tools with the
    front end's key). Off loopback the front end needs its key, which no page can send."""
    if not is_loopback(host):
        return None
    bare = host.strip().strip("[]")
    names = ["127.0.0.1", "localhost", "[::1]", f"[{bare}]" if ":" in bare else bare]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *(f"{name}:*" for name in names)],
        allowed_origins=[origin for name in names for origin in (f"http://{name}", f"http://{name}:*")],
    )


def http_app(frontend: Frontend, *, path: str | None = None, host: str | None = None) -> Starlette:
    """The streamable-HTTP app (both protocol eras); DNS-rebinding protection is on for every loopback host."""
    settings = frontend.settings.frontend
    path = path or settings.http_path
    host = host or settings.http_host
    app = frontend.server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        transport_security=rebinding_protection(host),
        session_idle_timeout=float(settings.dynamic_idle_seconds),
        max_sessions=settings.http_max_sessions,
    )
    serve_sessions = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with frontend.running(), serve_sessions(app):
            yield

    app.router.lifespan_context = lifespan
    table = SessionTable(per_client=settings.http_max_sessions_per_client, total=settings.http_max_sessions)
    security = frontend.server.session_manager.security_settings
    # No size limit of ours (the SDK answers 413 past 4 MiB), only the deadline: a body trickled a byte a second
    # held its request and connection for as long as the client liked.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=0)
    app.add_middleware(SessionBoundMiddleware, path=path, table=table, security=security)
    if settings.http_api_key:  # added last, so it runs first: a request without the key counts for nothing
        app.add_middleware(BearerKeyMiddleware, key=settings.http_api_key)
    else:
        app.add_middleware(LocalOnlyMiddleware)
    app.add_middleware(PlainRefusalsAsProblems, endpoint=path)  # the SDK's and Starlette's plain refusals
    app.add_middleware(HealthProbes, api=lambda: frontend.api)  # outermost: a balancer's probes need no key
    return app


async def serve_http(
    frontend: Frontend,
    host: str,
    port: int,
    path: str | None = None,
    on_listening: Callable[[str], None] | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve streamable HTTP with uvicorn until interrupted; `on_listening` gets the front end's URL once its socket
    accepts connections (the lifespan has run by then); `sock`, bound already, is the socket it listens on."""
    import uvicorn

    from service.http_transport import listening_server

    app = http_app(frontend, path=path, host=host)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on", **forwarding_options(frontend.settings)
    )
    url = f"http://{host}:{port}{path or frontend.settings.frontend.http_path}"

    def listening() -> None:
        logger.info("Toolscout MCP front end (%s) on %s", frontend.mode, url)
        if on_listening is not None:
            on_listening(url)

    await listening_server(config, listening).serve(sockets=None if sock is None else [sock])
