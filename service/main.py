"""The FastAPI application: create_app(settings) builds it, the lifespan connects and warms."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import Depends, FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from indexer.embedding import Embedder
from indexer.index.base import VectorIndex
from service import health, version
from service.catalog import event_routes as events
from service.catalog import routes as tools
from service.catalog.reconcile import reconcile_index
from service.catalog.seed import seed_demo_catalog
from service.cluster.runtime import start_cluster, stop_cluster
from service.cluster.servers import start_server_following, stop_server_following
from service.console.routes import install_console
from service.errors import install_error_handlers, problem_responses
from service.execution import routes as execute
from service.execution import runtime as gateway
from service.execution.code_mode import routes as code_mode_routes
from service.observability import install_observability
from service.observability import routes as metrics
from service.policy import key_routes as keys
from service.policy import routes as approvals
from service.policy import service as policy
from service.resources import build_resources, close_resources, start_resources
from service.search import routes as search
from service.search.service import start_search, start_search_log, stop_search_log, warm_search
from service.security.edges import install_edge_guards
from service.security.query_params import known_query_parameters
from service.settings import Settings
from service.upstream import routes as servers
from service.usage import learning
from service.usage import routes as analytics
from service.usage.retention import start_retention, stop_retention

logger = logging.getLogger(__name__)


def _hook_seconds(hook: Any, settings: Settings) -> float:
    """How long a shutdown hook may take: the gateway drains calls for the grace period, then five seconds for
    those its servers' stop ended, then writes (or spills) the log; the others do a few database writes at most."""
    limit = 3 * settings.db.timeout_seconds
    if hook is gateway.stop_gateway:
        limit += settings.execution.shutdown_grace_seconds + 5.0
    return limit


async def _bounded(work: Awaitable[None], seconds: float, what: Any) -> None:
    """Run one step of the shutdown, given up after `seconds`: a database that stopped answering kept a SIGTERM'd
    replica up until its SIGKILL."""
    with anyio.move_on_after(seconds) as scope:
        await work
    if scope.cancelled_caught:
        logger.error("shutdown: %s gave up after %g s", getattr(what, "__qualname__", what), seconds)


def create_app(
    settings: Settings | None = None,
    *,
    embedder: Embedder | None = None,
    index: VectorIndex | None = None,
    keyless_by_design: bool = False,
) -> FastAPI:
    """Build the app; tests pass settings (and optionally an embedder or index) explicitly. `keyless_by_design`:
    an in-process app of a local bench, which starts without the warning that no API key is configured."""
    settings = settings or Settings()
    resources = build_resources(settings, embedder)
    resources.keyless_by_design = keyless_by_design

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await start_resources(resources, index)
        await start_search(resources)
        try:  # a start-up that fails half way (e.g. refused open mode) still releases the index and database
            report = await reconcile_index(resources)
            logger.info("index reconciled with the catalog: %s", report.as_dict())
            # Not with a servers file: its servers replace the demo servers, whose 85 tools were then indexed all
            # the same, as catalog-only entries ranked among the file's own.
            demo = settings.demo_catalog and settings.execution.servers_file is None
            if demo and resources.retriever is not None and not len(resources.retriever.directory):
                seeded = await seed_demo_catalog(resources)
                if seeded is not None:
                    logger.info("empty catalog: indexed %d demo tools of real MCP servers", seeded)
            for hook in app.state.startup_hooks:
                await hook(resources)
            await warm_search(resources)
            await warm_routes(app)
            # What start-up built (catalog, name directory, model) lives as long as the process: out of the
            # collector's sight, so a full collection no longer walks it in the middle of a request.
            gc.collect()
            gc.freeze()
            yield
        finally:
            for hook in reversed(app.state.shutdown_hooks):
                await _bounded(hook(resources), _hook_seconds(hook, settings), hook)
            await _bounded(close_resources(resources), settings.db.timeout_seconds, close_resources)

    app = FastAPI(
        title="Toolscout",
        version=version(),
        summary="Semantic tool retrieval and execution for LLM agents over MCP servers",
        lifespan=lifespan,
        docs_url="/docs" if settings.docs_ui else None,
        redoc_url="/redoc" if settings.docs_ui else None,
        responses=problem_responses(),
        dependencies=[Depends(known_query_parameters)],
    )
    app.state.resources = resources
    app.state.startup_hooks = []
    app.state.shutdown_hooks = []
    # The search log starts first and stops last: code-mode runs draining at shutdown still log their searches.
    app.state.startup_hooks.append(start_search_log)
    app.state.shutdown_hooks.append(stop_search_log)
    app.state.startup_hooks += [policy.start_policy, learning.start_learning, start_retention]
    app.state.shutdown_hooks += [policy.stop_policy, learning.stop_learning, stop_retention]
    # The cluster first (the gateway's first syncs ask for writer locks) and, after the gateway, the
    # following of servers added or removed on other replicas; shutdown runs the hooks in reverse.
    app.state.startup_hooks.insert(0, start_cluster)
    app.state.shutdown_hooks.insert(0, stop_cluster)
    app.state.startup_hooks += [gateway.start_gateway, start_server_following]
    app.state.shutdown_hooks += [gateway.stop_gateway, stop_server_following]
    install_error_handlers(app)
    install_observability(app, resources)  # inside the edge guards: the host check still sees every request first
    install_edge_guards(app, settings)
    app.include_router(health.router)
    app.include_router(search.router)
    app.include_router(tools.router)
    app.include_router(approvals.router)
    app.include_router(analytics.router)
    app.include_router(keys.router)
    app.include_router(events.router)
    app.include_router(execute.router)
    app.include_router(servers.router)
    app.include_router(code_mode_routes.router)
    app.include_router(metrics.router)
    install_console(app)
    serve_openapi_encoded_once(app)
    return app


def serve_openapi_encoded_once(app: FastAPI) -> None:
    """`/openapi.json` from bytes encoded once: FastAPI caches the document but encodes its 146 KB again for every
    request, the costliest answer that needs no key (2.9 ms of the event loop's time each; a keyless flood from 8
    connections took an admin's `GET /tools` p50 from 9.7 to 369 ms). The routes are fixed once the app is built."""
    encoded: list[bytes] = []

    async def openapi(_: Request) -> Response:
        if not encoded:  # FastAPI's own encoding (JSONResponse's), once
            encoded.append(
                json.dumps(app.openapi(), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
            )
        return Response(encoded[0], media_type="application/json")

    path = app.openapi_url or "/openapi.json"
    routes = app.router.routes
    place = next(i for i, route in enumerate(routes) if getattr(route, "path", None) == path)
    routes[place] = Route(path, openapi, include_in_schema=False)


async def warm_routes(app: FastAPI) -> None:
    """Have the router prepare every route before ready: FastAPI prepares an included router's routes on the first
    request that reaches them (5 ms on the first `POST /search`, a third of that search). One request that
    matches no route, handed to the router itself: every router is tried, and no middleware sees it (no log line,
    no metric)."""
    path = "/\x00warm-up"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": {},
    }  # no "app": the router then answers 404 itself instead of raising for the exception middleware

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    try:
        await app.router(scope, receive, send)
    except Exception:  # noqa: BLE001 - a warm-up that fails leaves the first request slower, nothing else
        logger.warning("preparing the routes before ready failed", exc_info=True)


def stopping(app: FastAPI) -> None:
    """The server in front of the app begins to stop: end the /events streams. They never end by themselves, and
    the server waits for every connection to close before the lifespan's shutdown (which writes the logs held in
    memory) runs: one open stream, of any key or of an MCP front end, kept a stopped service waiting for ever."""
    resources = app.state.resources
    if resources.events is not None:
        resources.events.close()


def app_factory() -> FastAPI:
    """Entry point for `uvicorn --factory service.main:app_factory`."""
    return create_app()
