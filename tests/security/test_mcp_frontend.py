"""The MCP front end: client values never steer its REST paths, its sessions or its key."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import mcp.types as types
import pytest
import uvicorn
from mcp import Client

from service.errors import ToolscoutError
from service.mcp.api import ToolscoutApi
from service.mcp.serve import http_app
from service.mcp.server import create_frontend
from tests.processes import free_port
from tests.security.conftest import assert_problem, make_settings

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}


class PathRecorder:
    """An ASGI wrapper that records the path of every request reaching the REST app."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


@pytest.mark.parametrize("result_id", ["../keys", "../../keys", "..", "%2e%2e/keys", "x/../../keys"])
async def test_fetch_result_cannot_reach_other_routes(world: dict[str, Any], result_id: str) -> None:
    recorder = PathRecorder(world["app"])
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    frontend = create_frontend(settings, transport="memory", api_transport=httpx.ASGITransport(app=recorder))
    async with frontend.running(), Client(frontend.server) as client:
        result = await client.call_tool("fetch_result", {"result_id": result_id})
    assert result.is_error
    assert "tsk_" not in text_of(result) and '"keys"' not in text_of(result)
    assert all(path.startswith("/results/") or path == "/events" for path in recorder.paths), recorder.paths
    assert "/keys" not in recorder.paths


async def test_tool_lookups_cannot_reach_other_routes(world: dict[str, Any]) -> None:
    recorder = PathRecorder(world["app"])
    api = ToolscoutApi("http://127.0.0.1:8765", world["admin"], transport=httpx.ASGITransport(app=recorder))
    try:
        for name in ("../keys", "../servers", ".."):
            with pytest.raises(ToolscoutError):
                await api.get_tool(name)
    finally:
        await api.aclose()
    assert "/keys" not in recorder.paths and "/servers" not in recorder.paths


async def test_a_client_chosen_meta_session_cannot_take_over_another_session(world: dict[str, Any]) -> None:
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    transport = httpx.ASGITransport(app=world["app"])
    frontend = create_frontend(settings, mode="dynamic", transport="http", api_transport=transport)
    named = {"dev.toolscout/session": "shared"}
    alice_info = types.Implementation(name="alice", version="1")
    bob_info = types.Implementation(name="bob", version="1")
    async with (
        frontend.running(),
        Client(frontend.server, mode="auto", client_info=alice_info) as alice,
        Client(frontend.server, mode="auto", client_info=bob_info) as bob,
    ):
        found = json.loads(
            text_of(await alice.call_tool("search_tools", {"query": "weather forecast", "k": 1}, meta=named))
        )
        alice_tools = [t.name for t in (await alice.list_tools(cache_mode="bypass")).tools]
        assert found["tools"][0]["name"] in alice_tools
        # Bob names the same session: he neither sees nor changes Alice's activations.
        await bob.call_tool("search_tools", {"query": "purge the cache", "k": 1}, meta=named)
        bob_tools = [t.name for t in (await bob.list_tools(cache_mode="bypass")).tools]
        assert found["tools"][0]["name"] not in bob_tools
        assert [t.name for t in (await alice.list_tools(cache_mode="bypass")).tools] == alice_tools
    assert all(not key.startswith("client:") for key in frontend.sessions._sessions)


async def test_http_front_end_requires_its_bearer_key_and_slows_guessers(world: dict[str, Any]) -> None:
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    settings.frontend.http_api_key = "mcp-front-key-123"
    frontend = create_frontend(settings, transport="http", api_transport=httpx.ASGITransport(app=world["app"]))
    port = free_port()
    app = http_app(frontend, host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    import asyncio

    import anyio

    task = asyncio.create_task(server.serve())
    initialize = INITIALIZE
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    try:
        with anyio.fail_after(30):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
                await anyio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            anonymous = await http.post("/mcp", json=initialize, headers=headers)
            assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
            assert anonymous.headers["content-type"] == "application/problem+json"
            accepted = await http.post(
                "/mcp", json=initialize, headers={**headers, "Authorization": "Bearer mcp-front-key-123"}
            )
            assert accepted.status_code == 200, accepted.text
            statuses = [
                (
                    await http.post("/mcp", json=initialize, headers={**headers, "Authorization": f"Bearer w{i}"})
                ).status_code
                for i in range(8)
            ]
            assert statuses[:4] == [401] * 4 and statuses[-1] == 429
    finally:
        server.should_exit = True
        with anyio.fail_after(30):
            await task


async def test_a_web_page_cannot_drive_the_keyless_loopback_front_end(world: dict[str, Any]) -> None:
    """Without frontend.http_api_key the HTTP front end listens on loopback only, with the API key of its
    configuration: a page in the user's browser must not reach it. A page of another site is refused by its Origin,
    one of another localhost port may only send what needs no CORS preflight (text/plain), which is refused, and
    nothing answers the preflight that a JSON post needs. (Held in this pass; it rests on the MCP SDK's checks.)"""
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    frontend = create_frontend(settings, transport="http", api_transport=httpx.ASGITransport(app=world["app"]))
    app = http_app(frontend, host="127.0.0.1")
    initialize = json.dumps(INITIALIZE)
    accept = {"Accept": "application/json, text/event-stream"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8766") as http:
            foreign = {**accept, "Origin": "https://attacker.example", "Content-Type": "application/json"}
            assert (await http.post("/mcp", content=initialize, headers=foreign)).status_code == 403
            simple = {**accept, "Origin": "http://localhost:3000", "Content-Type": "text/plain"}
            assert (await http.post("/mcp", content=initialize, headers=simple)).status_code == 400
            preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
            answer = await http.options("/mcp", headers=preflight)
            assert answer.status_code >= 400 and "access-control-allow-origin" not in answer.headers


@pytest.mark.parametrize("bound", ["127.0.0.2", "localhost.localdomain", "127.0.0.1"])
async def test_a_rebinding_name_cannot_reach_the_keyless_front_end_on_any_loopback_address(
    world: dict[str, Any], bound: str
) -> None:
    """The CLI lets the keyless HTTP front end listen on any loopback address, but the SDK turns its Host check on
    for 127.0.0.1, localhost and ::1 only: bound to 127.0.0.2, a page whose name rebinds there (Host and Origin
    attacker.example) initialized a session and called time__get_current_time with the front end's API key."""
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    frontend = create_frontend(settings, transport="http", api_transport=httpx.ASGITransport(app=world["app"]))
    app = http_app(frontend, host=bound)
    initialize = json.dumps(INITIALIZE)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    literal = f"{bound}:8766"
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{literal}") as http:
            rebound = {**headers, "Host": "attacker.example:8766", "Origin": "http://attacker.example:8766"}
            refused = await http.post("/mcp", content=initialize, headers=rebound)
            own = await http.post("/mcp", content=initialize, headers={**headers, "Host": literal})
    assert refused.status_code == 421, refused.text
    assert own.status_code == 200, own.text


async def test_the_front_ends_refusals_are_problems_saying_why(world: dict[str, Any]) -> None:
    """The SDK refused a foreign Origin, a rebinding Host and a text/plain post with a bare `Invalid Origin header`
    (text/plain), and Starlette an unknown path with `Not Found`: now problems quoting it and saying why."""
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    frontend = create_frontend(settings, transport="http", api_transport=httpx.ASGITransport(app=world["app"]))
    app = http_app(frontend, host="127.0.0.1")
    initialize = json.dumps(INITIALIZE)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8766") as http:
            cases = {
                403: ({**headers, "Origin": "https://attacker.example"}, "/mcp", "Invalid Origin header", "origin"),
                421: ({**headers, "Host": "attacker.example:8766"}, "/mcp", "Invalid Host header", "loopback Host"),
                400: ({**headers, "Content-Type": "text/plain"}, "/mcp", "Invalid Content-Type", "application/json"),
                404: (headers, "/other", "Not Found", "at /other; the MCP endpoint is /mcp ("),
            }
            for status, (sent, path, said, why) in cases.items():
                body = assert_problem(await http.post(path, content=initialize, headers=sent), status)
                assert body["title"].startswith(said) and said in body["detail"] and why in body["detail"], body
            own = await http.post("/mcp", content=initialize, headers=headers)
            assert own.status_code == 200 and own.headers["content-type"].startswith("text/event-stream")
