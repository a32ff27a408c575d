"""Real upstream MCP servers: mcp-server-time (PyPI) and server-memory / server-everything (npm) over stdio,
the in-repo test server over stdio and streamable HTTP. Normal calls, bad arguments, unknown tools,
timeouts, a child killed in the middle of a call, list_changed from a child, crash diagnostics, and the demo
configuration."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from upstream_support import HttpServer, local_server, node_server, running

from service.db.models import Server

pytestmark = pytest.mark.upstream


async def server_health(client: httpx.AsyncClient, server_id: str) -> dict[str, Any]:
    response = await client.get(f"/servers/{server_id}")
    assert response.status_code == 200
    return dict(response.json()["health"])


async def wait_for(condition: Any, limit_seconds: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit_seconds
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_time_server_from_pypi(tmp_path: Path, python_servers: str) -> None:
    servers = {"time": {"command": python_servers, "args": ["-m", "mcp_server_time"]}}
    async with running(tmp_path, servers) as (_, client):
        tokyo = await client.post(
            "/execute", json={"name": "time__get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}
        )
        bad = await client.post(
            "/execute", json={"name": "time__convert_time", "arguments": {"source_timezone": 9}}
        )
        wrong_zone = await client.post(
            "/execute", json={"name": "time__get_current_time", "arguments": {"timezone": "Mars/Olympus"}}
        )
        unknown = await client.post("/execute", json={"name": "time__get_time", "arguments": {}})
        health = await server_health(client, "time")
    assert tokyo.status_code == 200, tokyo.text
    result = tokyo.json()["structured_content"]
    assert result["timezone"] == "Asia/Tokyo"
    assert datetime.fromisoformat(result["datetime"]).utcoffset().total_seconds() == 9 * 3600
    assert bad.status_code == 422
    assert [(e["pointer"], e["keyword"]) for e in bad.json()["errors"]] == [
        ("/source_timezone", "type"),
        ("/target_timezone", "required"),
        ("/time", "required"),
    ]
    assert wrong_zone.status_code == 200 and wrong_zone.json()["is_error"] is True
    assert "Mars/Olympus" in wrong_zone.json()["content"][0]["text"]
    assert unknown.status_code == 404
    assert unknown.json()["closest"] == ["time__get_current_time"]  # convert_time shares one word of two: not close
    assert health["state"] == "ready" and health["tools"] == 2 and health["pid"] > 0
    assert health["calls"] == 2 and health["latency"]["samples"] == 2
    assert health["server_info"]["name"] == "mcp-time"


@pytest.mark.node
async def test_memory_server_from_npm(tmp_path: Path, node_modules: Path) -> None:
    servers = {
        "memory": node_server(node_modules, "memory", env={"MEMORY_FILE_PATH": str(tmp_path / "mem.jsonl")})
    }
    entity = {"name": "Ada Lovelace", "entityType": "person", "observations": ["wrote the first program"]}
    async with running(tmp_path, servers) as (_, client):
        created = await client.post(
            "/execute", json={"name": "memory__create_entities", "arguments": {"entities": [entity]}}
        )
        found = await client.post(
            "/execute", json={"name": "memory__search_nodes", "arguments": {"query": "Lovelace"}}
        )
        invalid = await client.post(
            "/execute", json={"name": "memory__create_entities", "arguments": {"entities": [{"name": "x"}]}}
        )
        tools = (await client.get("/tools", params={"server": "memory"})).json()
    assert created.status_code == 200 and created.json()["is_error"] is False
    assert "wrote the first program" in found.json()["content"][0]["text"]
    assert invalid.status_code == 422
    assert {e["pointer"] for e in invalid.json()["errors"]} == {
        "/entities/0/entityType",
        "/entities/0/observations",
    }
    assert tools["total"] == 9
    assert (tmp_path / "mem.jsonl").read_text().count("Ada Lovelace") == 1


@pytest.mark.node
async def test_everything_server_killed_mid_call_is_restarted(tmp_path: Path, node_modules: Path) -> None:
    servers = {"everything": node_server(node_modules, "everything", "stdio")}
    async with running(tmp_path, servers) as (app, client):
        total = await client.post(
            "/execute", json={"name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}
        )
        assert total.json()["content"][0]["text"] == "The sum of 2 and 3 is 5."

        # server-everything announces tools/list_changed after the handshake: the catalog re-syncs.
        async def resynced() -> bool:
            health = await server_health(client, "everything")
            return bool(health["list_changed"] >= 1 and health["syncs"] >= 2)

        await wait_for(resynced)

        before = await server_health(client, "everything")
        call = asyncio.create_task(
            client.post(
                "/execute",
                json={
                    "name": "everything__trigger-long-running-operation",
                    "arguments": {"duration": 10, "steps": 2},
                },
            )
        )
        await asyncio.sleep(1.0)
        os.kill(before["pid"], signal.SIGKILL)
        failed = await call
        after_crash = await client.post(
            "/execute", json={"name": "everything__echo", "arguments": {"message": "back"}}
        )
        after = await server_health(client, "everything")
    assert failed.status_code == 502
    assert failed.json()["restarting"] is True
    assert after_crash.status_code == 200
    assert after_crash.json()["content"][0]["text"] == "Echo: back"
    assert after["restarts"] == 1 and after["pid"] != before["pid"] and after["state"] == "ready"
    assert "code -9" in after["last_error"]


@pytest.mark.node
async def test_everything_server_call_outliving_the_timeout(tmp_path: Path, node_modules: Path) -> None:
    servers = {"everything": node_server(node_modules, "everything", "stdio", timeout=1)}
    async with running(tmp_path, servers) as (_, client):
        slow = await client.post(
            "/execute",
            json={
                "name": "everything__trigger-long-running-operation",
                "arguments": {"duration": 5, "steps": 5},
            },
        )
        echo = await client.post(
            "/execute", json={"name": "everything__echo", "arguments": {"message": "ok"}}
        )
        health = await server_health(client, "everything")
    assert slow.status_code == 504
    assert "cancelled" in slow.json()["detail"]
    assert echo.json()["content"][0]["text"] == "Echo: ok"
    assert health["timeouts"] == 1 and health["restarts"] == 0


async def test_child_killed_mid_call_then_next_call_succeeds(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": local_server("stdio")}) as (_, client):
        pid = (await client.post("/execute", json={"name": "t__pid"})).json()["structured_content"]["result"]
        call = asyncio.create_task(
            client.post("/execute", json={"name": "t__sleep", "arguments": {"seconds": 10}})
        )
        await asyncio.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        failed = await call
        new_pid = (await client.post("/execute", json={"name": "t__pid"})).json()["structured_content"][
            "result"
        ]
        crashed = await client.post("/execute", json={"name": "t__crash"})
        after = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "alive"}})
        health = await server_health(client, "t")
    assert failed.status_code == 502 and "being restarted" in failed.json()["detail"]
    assert new_pid != pid
    assert crashed.status_code == 502
    assert after.json()["content"][0]["text"] == "alive"
    assert health["restarts"] == 2 and health["failures"] == 2


async def test_what_a_server_says_at_initialize_is_kept_for_ranking(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": local_server("stdio")}) as (app, _):
        resources = app.state.resources
        async with resources.session() as session:
            row = await session.get(Server, "t")
        servers = resources.retriever.servers.servers()
    assert row is not None and row.info == {
        "name": "toolscout-test", "title": "Toolscout test server",
        "instructions": "Tools to exercise a gateway: echo text, sleep, fail and crash on purpose.",
    }
    assert servers == ["t"]


async def test_a_servers_last_sync_names_its_zone(tmp_path: Path) -> None:
    """GET /servers gave last_sync_at as 2026-12-07T16:54:53.239427 (SQLite's naive value) beside health's +00:00."""
    async with running(tmp_path, {"t": local_server("stdio")}) as (_app, client):
        view = (await client.get("/servers/t")).json()
    assert view["last_sync_at"].endswith("+00:00") and view["health"]["last_sync_at"].endswith("+00:00")
    synced = datetime.fromisoformat(view["last_sync_at"])
    connected = datetime.fromisoformat(view["health"]["connected_at"])
    assert abs((synced - connected).total_seconds()) < 60


async def test_list_changed_from_a_stdio_child_resyncs_the_catalog(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": local_server("stdio")}) as (_, client):
        assert (await client.get("/tools/t__zeta")).status_code == 404
        added = await client.post("/execute", json={"name": "t__add_tool", "arguments": {"name": "zeta"}})
        assert added.status_code == 200

        async def indexed() -> bool:
            return (await client.get("/tools/t__zeta")).status_code == 200

        await wait_for(indexed)
        tool = (await client.get("/tools/t__zeta")).json()
        call = await client.post("/execute", json={"name": "t__zeta", "arguments": {"value": "v"}})
        found = await client.post("/search", json={"query": "a tool added at run time called zeta", "k": 3})
        health = await server_health(client, "t")
    assert tool["description"] == "A tool added at run time called zeta."
    assert call.json()["content"][0]["text"] == "zeta: v"
    assert found.json()["results"][0]["name"] == "t__zeta"
    assert health["list_changed"] == 1 and health["tools"] == 8


async def test_streamable_http_server(tmp_path: Path, http_server: HttpServer) -> None:
    servers = {
        "remote": {"url": http_server.url, "headers": {"X-Trace": "${TOOLSCOUT_TEST_NOT_SET}"}, "timeout": 1}
    }
    async with running(tmp_path, servers) as (_, client):
        echo = await client.post(
            "/execute", json={"name": "remote__echo", "arguments": {"text": "over http"}}
        )
        slow = await client.post("/execute", json={"name": "remote__sleep", "arguments": {"seconds": 5}})
        added = await client.post(
            "/execute", json={"name": "remote__add_tool", "arguments": {"name": "omega"}}
        )
        assert added.status_code == 200

        async def indexed() -> bool:
            return (await client.get("/tools/remote__omega")).status_code == 200

        await wait_for(indexed)
        http_server.kill()
        down = await client.post("/execute", json={"name": "remote__echo", "arguments": {"text": "x"}})
        http_server.start()
        back = await client.post("/execute", json={"name": "remote__echo", "arguments": {"text": "again"}})
        if back.status_code != 200:  # the first reconnection attempt may come before the server listens
            await wait_for(lambda: _ready(client, "remote"))
            back = await client.post(
                "/execute", json={"name": "remote__echo", "arguments": {"text": "again"}}
            )
        view = (await client.get("/servers/remote")).json()
    assert echo.json()["content"][0]["text"] == "over http"
    assert slow.status_code == 504
    assert down.status_code == 502
    assert back.status_code == 200 and back.json()["content"][0]["text"] == "again"
    assert view["transport"] == "http" and view["config"]["headers"] == {"X-Trace": "***"}
    assert view["health"]["restarts"] >= 1 and view["health"]["pid"] is None


async def _ready(client: httpx.AsyncClient, server_id: str) -> bool:
    return (await server_health(client, server_id))["state"] == "ready"


async def test_a_server_that_fails_to_start_reports_its_stderr(tmp_path: Path) -> None:
    failing = {
        "command": sys.executable,
        "args": ["-c", "import sys; sys.stderr.write('boom: SECRET_TOKEN is not set\\n'); sys.exit(2)"],
    }
    async with running(
        tmp_path,
        {"broken": failing, "t": local_server("stdio")},
        startup_wait_seconds=5,
        reconnect_initial_seconds=0.1,
    ) as (_, client):

        async def retried() -> bool:
            return (await server_health(client, "broken"))["restarts"] >= 2

        await wait_for(retried)
        health = await server_health(client, "broken")
        call = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "unaffected"}})
    assert health["state"] in ("backoff", "connecting", "starting")
    assert "exited with code 2" in health["last_error"]
    assert "boom: SECRET_TOKEN is not set" in health["last_error"]
    assert call.json()["content"][0]["text"] == "unaffected"


@pytest.mark.node
async def test_demo_configuration_starts_real_servers(
    tmp_path: Path, python_servers: str, node_modules: Path
) -> None:
    async with running(tmp_path, None, demo=True) as (_, client):
        servers = {s["id"]: s for s in (await client.get("/servers")).json()["servers"]}
        log = await client.post(
            "/execute",
            json={"name": "git__git_log", "arguments": {"repo_path": str(tmp_path / "demo" / "repo")}},
        )
        listing = await client.post(
            "/execute",
            json={
                "name": "filesystem__list_directory",
                "arguments": {"path": str(tmp_path / "demo" / "files")},
            },
        )
        now = await client.post(
            "/execute", json={"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}
        )
        found = await client.post(
            "/search", json={"query": "show the commit history of a git repository", "k": 5}
        )
        echoed = await client.post("/execute", json={"name": "everything__echo", "arguments": {"message": "hi"}})
    assert echoed.json()["content"][0]["text"] == "Echo: hi", echoed.text  # behind the egress proxy and preload
    assert set(servers) == {"time", "fetch", "git", "memory", "filesystem", "everything"}
    assert all(s["state"] == "ready" for s in servers.values()), {k: s["health"] for k, s in servers.items()}
    assert servers["git"]["tools"] == 12 and servers["time"]["tools"] == 2
    assert "Add hello()" in log.json()["content"][0]["text"]
    assert "README.md" in listing.json()["content"][0]["text"]
    assert now.json()["structured_content"]["timezone"] == "UTC"
    assert "git__git_log" in [r["name"] for r in found.json()["results"]]
