"""Hostile upstream servers: what they list is checked, and one server's tools never take another's names."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from upstream_support import TEST_SERVER, local_server, running

from indexer.tools import qualify
from tests.processes import free_port, stop_process, wait_for_port

pytestmark = pytest.mark.upstream


def listed(tmp_path: Path, name: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """An mcpServers entry for the test server listing exactly these tools."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"tools": tools}))
    return local_server("listed", str(path))


def tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"The tool {name}.", "inputSchema": {"type": "object"}, **extra}


async def test_a_server_cannot_take_the_qualified_name_of_another_servers_tool(tmp_path: Path) -> None:
    # Server `a` tool `b__c` and server `a__b` tool `c` both qualified as `a__b__c` (the first to sync kept it): a
    # tool's part never holds the separator now, so each keeps a name of its own whatever the order of the syncs.
    servers = {
        "a__b": listed(tmp_path, "ab", [tool("c")]),
        "a": listed(tmp_path, "a", [tool("b__c"), tool("other")]),
    }
    lookalike = qualify("a", "b__c")
    async with running(tmp_path, servers) as (_, client):
        for server in ("a", "a__b", "a"):  # each server syncs again (as on a restart or list_changed)
            report = (await client.post(f"/servers/{server}/refresh")).json()
            assert report["state"] == "ready", report
        owner = (await client.get("/tools/a__b__c")).json()
        assert (owner["server"], owner["tool"]) == ("a__b", "c")
        assert (await client.get(f"/tools/{lookalike}")).json()["server"] == "a"
        call = (await client.post("/execute", json={"name": "a__b__c", "arguments": {}})).json()
        assert call["content"][0]["text"] == "c:{}"
        call = (await client.post("/execute", json={"name": lookalike, "arguments": {}})).json()
        assert call["content"][0]["text"] == "b__c:{}"
        for server in ("a", "a__b"):
            assert (await client.get(f"/servers/{server}")).json()["health"]["last_error"] is None
        assert (await client.get("/tools/a__other")).json()["server"] == "a"


async def test_tools_a_server_lists_that_cannot_be_trusted_are_refused_and_the_rest_kept(tmp_path: Path) -> None:
    tools = [
        tool("good"),
        tool("n" * 10_000),
        tool("big", description="d" * 1_000_000),
        tool("bad_schema", inputSchema={"type": "object", "properties": {"x": {"type": 5}}}),
        *(tool(f"many_{i}") for i in range(2000)),
    ]
    async with running(tmp_path, {"h": listed(tmp_path, "h", tools)}) as (_, client):
        view = (await client.get("/servers/h")).json()
        assert view["state"] == "ready" and view["tools"] == 2001, view
        assert view["health"]["last_error"].startswith("3 listed tools refused; first: 'nnnn"), view["health"]
        for name in ("h__good", "h__many_1999"):
            assert (await client.get(f"/tools/{name}")).status_code == 200
        assert (await client.get("/tools/h__big")).status_code == 404
        call = (await client.post("/execute", json={"name": "h__good", "arguments": {}})).json()
        assert call["content"][0]["text"] == "good:{}"


async def test_a_result_nested_past_the_parsers_depth_fails_the_call_at_once_and_keeps_the_session(
    tmp_path: Path,
) -> None:
    # The SDK's parser reads 200 levels: a response past them (or not of JSON-RPC's shape) reached the session as
    # a bare exception, and its call waited out the call timeout (a 504 after 30 s).
    async with running(tmp_path, {"d": local_server("deep")}, timeout_seconds=30) as (_, client):

        async def call(name: str, **arguments: Any) -> tuple[int, dict[str, Any], float]:
            started = time.monotonic()
            response = await client.post("/execute", json={"name": f"d__{name}", "arguments": arguments})
            return response.status_code, response.json(), time.monotonic() - started

        status, body, _ = await call("nested", depth=190)  # within the limit: the whole value comes back
        value, depth = body["structured_content"]["deep"], 0
        while value:
            value, depth = value[0], depth + 1
        assert (status, depth) == (200, 189), body
        for arguments, reason in (
            ({"depth": 300}, "it nests arrays and objects more than 200 levels deep"),
            ({"result": "number"}, "it is not a JSON-RPC response (its result must be an object"),
        ):
            status, problem, seconds = await call("nested", **arguments)
            assert (status, problem["type"]) == (502, "https://toolscout.dev/problems/upstream-error"), problem
            assert problem["detail"].startswith(
                f"MCP server 'd' sent a result for nested that cannot be read: {reason}"
            )
            assert seconds < 5, seconds
            status, body, _ = await call("echo", text="still here")  # the same session, not restarted
            assert (status, body["content"][0]["text"]) == (200, "still here"), body
        pid = (await client.get("/servers/d")).json()["health"]["pid"]
        # Too deep for any parser to find which call it answers: the session is broken, its calls fail now.
        status, problem, seconds = await call("nested", depth=5000)
        assert status == 502 and seconds < 5, (problem, seconds)
        assert problem["detail"] == (
            "MCP server 'd' failed during nested: the server sent a message that cannot be read: it nests arrays and "
            "objects more than 200 levels deep (the limit of the MCP client's JSON parser); it is being restarted"
        )
        status, body, _ = await call("echo", text="restarted")
        assert (status, body["content"][0]["text"]) == (200, "restarted"), body
        assert (await client.get("/servers/d")).json()["health"]["pid"] != pid


@pytest.fixture
def deep_http_port() -> Iterator[int]:
    """The hand-written JSON-RPC server over streamable HTTP on a free local port."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(TEST_SERVER), "deep-http", str(port)])
    try:
        wait_for_port(port, process, 20, "the hand-written HTTP server")
        yield port
    finally:
        stop_process(process)


async def test_over_http_a_result_nested_past_the_parsers_depth_is_a_502_saying_so(
    tmp_path: Path, deep_http_port: int
) -> None:
    # The SDK's HTTP client answered the call itself, as error -32700 quoting pydantic ("answered nested with error
    # -32700: Failed to parse JSON response: 1 validation error for union[...]").
    servers = {"d": {"url": f"http://127.0.0.1:{deep_http_port}/mcp"}}
    async with running(tmp_path, servers, upstream_allowed_hosts=["127.0.0.0/8"]) as (_, client):
        problem = (await client.post("/execute", json={"name": "d__nested", "arguments": {"depth": 300}})).json()
        assert (problem["status"], problem["detail"]) == (
            502,
            "MCP server 'd' sent a result for nested that cannot be read: it nests arrays and objects more than "
            "200 levels deep (the limit of the MCP client's JSON parser)",
        )
        echoed = (await client.post("/execute", json={"name": "d__echo", "arguments": {"text": "on"}})).json()
        assert echoed["content"][0]["text"] == "on"
