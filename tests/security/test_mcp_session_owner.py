"""An MCP session of the HTTP front end answers only the client that opened it. The front end has one key
(frontend.http_api_key), which tells no two clients apart: whoever held a session id (read off a log, a proxy, a
shared terminal) and the key drove that session from anywhere, read its stream and ended it. Now a session's id is
unknown to every other address (the SDK's own 404), and without the key nothing gets past the 401."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import uvicorn

from service.mcp.serve import http_app
from service.mcp.server import create_frontend
from tests.processes import free_port
from tests.security.conftest import make_settings
from tests.security.test_mcp_frontend import INITIALIZE

KEY = "mcp-front-key-123"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@asynccontextmanager
async def front_end(world: dict[str, Any]) -> AsyncIterator[str]:
    """A keyed HTTP front end served by uvicorn on 127.0.0.1; its URL."""
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    settings.frontend.http_api_key = KEY
    frontend = create_frontend(settings, transport="http", api_transport=httpx.ASGITransport(app=world["app"]))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(http_app(frontend, host="127.0.0.1"), host="127.0.0.1", port=port, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    try:
        with anyio.fail_after(30):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
                await anyio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with anyio.fail_after(30):
            await task


def client_from(url: str, address: str) -> httpx.AsyncClient:
    """A client whose connections leave from `address` (any 127.x address is this machine's loopback)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=30, headers={"Authorization": f"Bearer {KEY}"})


async def test_another_client_with_the_key_finds_no_session_behind_the_id(world: dict[str, Any]) -> None:
    async with front_end(world) as url, client_from(url, "127.0.0.1") as alice, client_from(url, "127.0.0.2") as eve:
        opened = await alice.post("/mcp", json=INITIALIZE, headers=HEADERS)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        own = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        assert (await alice.post("/mcp", json=INITIALIZED, headers=own)).status_code == 202
        listed = await alice.post("/mcp", json=LIST, headers=own)
        assert listed.status_code == 200 and "search_tools" in listed.text, listed.text

        unknown = await eve.post("/mcp", json=LIST, headers={**own, "Mcp-Session-Id": "f" * 32})
        assert unknown.status_code == 404, unknown.text
        taken = await eve.post("/mcp", json=LIST, headers=own)
        # Before: 200 and alice's tool list (call_tool as alice, her stream, DELETE ended her session).
        assert taken.status_code == 404 and taken.text == unknown.text, taken.text
        assert taken.headers["content-type"] == unknown.headers["content-type"]
        assert "mcp-session-id" not in taken.headers
        assert (await eve.get("/mcp", headers=own)).status_code == 404
        assert (await eve.delete("/mcp", headers=own)).status_code == 404

        keyless = await eve.post("/mcp", json=LIST, headers={**own, "Authorization": ""})
        assert keyless.status_code == 401

        again = await alice.post("/mcp", json=LIST, headers=own)  # hers, untouched by the attempts
        assert again.status_code == 200 and "search_tools" in again.text, again.text
        assert (await alice.delete("/mcp", headers=own)).status_code == 200
