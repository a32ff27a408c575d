"""Hostile upstream servers: what they list is checked, and one server's tools never take another's names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from upstream_support import local_server, running

pytestmark = pytest.mark.upstream


def listed(tmp_path: Path, name: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """An mcpServers entry for the test server listing exactly these tools."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"tools": tools}))
    return local_server("listed", str(path))


def tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"The tool {name}.", "inputSchema": {"type": "object"}, **extra}


async def test_a_server_cannot_take_the_qualified_name_of_another_servers_tool(tmp_path: Path) -> None:
    # Server `a` tool `b__c` and server `a__b` tool `c` both qualify as `a__b__c`.
    servers = {
        "a__b": listed(tmp_path, "ab", [tool("c")]),
        "a": listed(tmp_path, "a", [tool("b__c"), tool("other")]),
    }
    async with running(tmp_path, servers) as (_, client):
        owner = (await client.get("/tools/a__b__c")).json()
        assert owner["server"] in ("a", "a__b")
        intruder = "a" if owner["server"] == "a__b" else "a__b"
        # Each server syncs again (as on a restart or list_changed): the first owner keeps the name.
        for server in (intruder, owner["server"], intruder):
            report = (await client.post(f"/servers/{server}/refresh")).json()
            assert report["state"] == "ready", report
        after = (await client.get("/tools/a__b__c")).json()
        assert (after["server"], after["tool"]) == (owner["server"], owner["tool"])
        call = (await client.post("/execute", json={"name": "a__b__c", "arguments": {}})).json()
        assert call["content"][0]["text"] == f"{owner['tool']}:{{}}"
        intruder_view = (await client.get(f"/servers/{intruder}")).json()
        assert "a__b__c" in (intruder_view["health"]["last_error"] or ""), intruder_view["health"]
        assert (await client.get("/tools/a__other")).json()["server"] == "a"  # the rest of the server is kept


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
