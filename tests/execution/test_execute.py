"""/execute, /execute/batch, /results and /servers against a real MCP server child
(tests/upstream/mcp_test_server.py over stdio): validation, unknown tools, timeouts, tool errors, big
results, the execution log and shutdown."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from indexer.embedding import HashingEmbedder
from service.db.models import Execution, StoredResult
from service.errors import NotFound
from service.execution.runtime import get_gateway
from service.main import create_app
from service.policy.callers import Caller
from service.settings import DatabaseSettings, ExecutionSettings, PolicySettings, Settings

pytestmark = pytest.mark.upstream

TEST_SERVER = Path(__file__).resolve().parents[1] / "upstream" / "mcp_test_server.py"
LINE = "line {i}: the quick brown fox jumps over the lazy dog"


# stdio over the API is off by default (issue 9); these tests register the test server that way.
API_STDIO: dict[str, Any] = {"allow_api_stdio": True, "api_stdio_commands": [sys.executable, "/nonexistent/mcp-server"]}


def stdio_entry(*args: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(TEST_SERVER), *args], **extra}


@asynccontextmanager
async def running(
    tmp_path: Path, servers: dict[str, Any], database_url: str | None = None, **execution: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with these upstream servers, its lifespan run; start-up waits for the servers."""
    servers_file = tmp_path / "servers.json"
    servers_file.write_text(json.dumps({"mcpServers": servers}))
    settings = Settings(
        data_dir=tmp_path,
        demo_catalog=False,
        db=DatabaseSettings(url=database_url),
        policy=PolicySettings(rate_limit_per_minute=0),
        execution=ExecutionSettings(
            servers_file=servers_file, demo_servers=False, startup_wait_seconds=60, **(API_STDIO | execution)
        ),
    )
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as client:
            yield app, client


async def executions(app: FastAPI) -> list[Execution]:
    resources = app.state.resources
    await get_gateway(resources).log.flush(10)
    async with resources.session() as session:
        return list((await session.scalars(select(Execution).order_by(Execution.started_at))).all())


async def test_call_returns_the_mcp_result_and_logs_one_row(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, client):
        response = await client.post(
            "/execute", json={"name": "t__echo", "arguments": {"text": "hi", "times": 2}, "search_id": "s-1"}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["name"] == "t__echo" and body["server"] == "t" and body["status"] == "ok"
        assert body["content"] == [{"type": "text", "text": "hi hi"}]
        assert body["structured_content"] == {"result": "hi hi"}
        assert body["is_error"] is False and body["truncated"] is False and body["result_id"] is None
        # The text and the structured content beside it: 'hi hi\n{"result":"hi hi"}'.
        assert body["total_tokens"] == body["returned_tokens"] == 9
        rows = await executions(app)
    assert len(rows) == 1
    row = rows[0]
    assert (row.id, row.caller, row.tool, row.server_id, row.search_id, row.status) == (
        body["execution_id"],
        "local",
        "t__echo",
        "t",
        "s-1",
        "ok",
    )
    digest = hashlib.sha256(json.dumps({"text": "hi", "times": 2}, sort_keys=True, separators=(",", ":")).encode())
    assert row.arguments_digest == digest.hexdigest()
    assert row.arguments is None  # raw arguments only when log_raw_arguments is on
    assert row.input_tokens > 0 and row.output_tokens == 9
    assert row.error_class is None and row.duration_ms > 0 and row.finished_at >= row.started_at


async def test_unknown_tool_is_404_naming_the_closest_tools(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, client):
        response = await client.post("/execute", json={"name": "t__ecko", "arguments": {"text": "x"}})
        rows = await executions(app)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["closest"][0] == "t__echo"
    assert "t__echo" in problem["detail"]
    assert problem["execution_id"] == rows[0].id
    assert (rows[0].status, rows[0].error_class, rows[0].server_id) == ("not_found", "NotFound", None)


async def test_invalid_arguments_are_422_with_a_json_pointer_per_error(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}, log_raw_arguments=True) as (app, client):
        wrong_types = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": 5, "times": "x"}})
        missing = await client.post("/execute", json={"name": "t__echo", "arguments": {"times": 1}})
        rows = await executions(app)
    assert wrong_types.status_code == 422
    problem = wrong_types.json()
    assert problem["type"].endswith("/invalid-arguments")
    assert problem["errors"] == [
        {"pointer": "/text", "reason": "5 is not of type 'string'", "keyword": "type"},
        {"pointer": "/times", "reason": "'x' is not of type 'integer'", "keyword": "type"},
    ]
    assert missing.json()["errors"] == [
        {"pointer": "/text", "reason": "'text' is a required property", "keyword": "required"}
    ]
    assert [r.status for r in rows] == ["invalid_arguments", "invalid_arguments"]
    assert rows[0].arguments == {"text": 5, "times": "x"}  # log_raw_arguments keeps them
    assert rows[0].server_id == "t"


async def test_arguments_nested_too_deep_for_the_mcp_client_are_a_422_not_a_500(tmp_path: Path) -> None:
    def nested(levels: int) -> Any:
        value: Any = "x"
        for _ in range(levels):
            value = {"a": value}
        return value

    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, client):
        deep = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "hi", "x": nested(299)}})
        fine = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "hi", "x": nested(99)}})
        rows = await executions(app)
    assert deep.status_code == 422, deep.text
    assert deep.json()["errors"] == [
        {"pointer": "", "reason": "nested more than 100 arrays or objects deep", "keyword": "depth"}
    ]
    assert fine.status_code == 200 and fine.json()["content"] == [{"type": "text", "text": "hi"}]
    assert [r.status for r in rows] == ["invalid_arguments", "ok"]


async def test_tool_error_is_returned_as_a_result(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, client):
        response = await client.post("/execute", json={"name": "t__fail", "arguments": {"reason": "no luck"}})
        rows = await executions(app)
    assert response.status_code == 200
    body = response.json()
    assert body["is_error"] is True and body["status"] == "tool_error"
    assert "no luck" in body["content"][0]["text"]
    assert rows[0].status == "tool_error"


async def test_a_call_that_outlives_the_timeout_is_504_and_the_session_survives(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}, timeout_seconds=0.5) as (app, client):
        slow = await client.post("/execute", json={"name": "t__sleep", "arguments": {"seconds": 5}})
        fast = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "still here"}})
        servers = (await client.get("/servers")).json()["servers"]
        rows = await executions(app)
    assert slow.status_code == 504
    assert slow.json()["timeout_seconds"] == 0.5
    assert fast.status_code == 200 and fast.json()["content"][0]["text"] == "still here"
    health = servers[0]["health"]
    assert health["timeouts"] == 1 and health["restarts"] == 0 and health["state"] == "ready"
    assert [(r.status, r.error_class) for r in rows] == [("timeout", "UpstreamTimeout"), ("ok", None)]
    assert 400 < rows[0].duration_ms < 2000


async def test_per_server_timeout_overrides_the_default(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio", timeout=0.3)}, timeout_seconds=30) as (_, client):
        response = await client.post("/execute", json={"name": "t__sleep", "arguments": {"seconds": 3}})
    assert response.status_code == 504 and response.json()["timeout_seconds"] == 0.3


async def test_a_huge_result_is_cut_to_the_budget_and_paged_through(tmp_path: Path) -> None:
    lines = 3000
    expected = "\n".join(LINE.format(i=i) for i in range(lines))
    async with running(tmp_path, {"t": stdio_entry("stdio")}, result_token_budget=1000) as (app, client):
        response = await client.post("/execute", json={"name": "t__big", "arguments": {"lines": lines}})
        body = response.json()
        assert body["truncated"] is True and body["structured_content"] is None
        assert body["returned_tokens"] == 1000 and body["total_tokens"] > 30_000
        head = body["content"][0]["text"]
        assert expected.startswith(head) and len(head) < len(expected)
        assert body["result_id"] in body["content"][1]["text"]
        pages, offset = [head], body["returned_tokens"]
        while offset is not None:
            page = await client.get(f"/results/{body['result_id']}", params={"offset": offset, "limit": 7000})
            assert page.status_code == 200
            data = page.json()
            assert data["offset"] == offset and data["total_tokens"] == body["total_tokens"]
            pages.append(data["text"])
            offset = data["next_offset"]
        missing = await client.get("/results/00000000-0000-0000-0000-000000000000")
        rows = await executions(app)
        store = get_gateway(app.state.resources).results
        with pytest.raises(NotFound):
            await store.page(Caller("someone-else", frozenset()), body["result_id"], 0, 10)
    assert "".join(pages) == expected
    assert missing.status_code == 404
    assert rows[0].result_id == body["result_id"] and rows[0].output_tokens == body["total_tokens"]


async def test_batch_runs_in_parallel_and_keeps_request_order(tmp_path: Path) -> None:
    calls = [
        {"name": "t__sleep", "arguments": {"seconds": 1.0}},
        {"name": "t__nope"},
        {"name": "t__echo", "arguments": {"text": 1}},
        {"name": "t__sleep", "arguments": {"seconds": 1.0}},
        {"name": "t__echo", "arguments": {"text": "last"}},
    ]
    async with running(tmp_path, {"t": stdio_entry("stdio")}, batch_concurrency=4) as (app, client):
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await client.post("/execute/batch", json={"calls": calls})
        elapsed = loop.time() - started
        too_many = await client.post("/execute/batch", json={"calls": [{"name": "t__echo"}] * 101})
        rows = await executions(app)
    body = response.json()
    assert response.status_code == 200
    assert [item["index"] for item in body["results"]] == [0, 1, 2, 3, 4]
    assert [item["status"] for item in body["results"]] == [200, 404, 422, 200, 200]
    assert (body["succeeded"], body["failed"]) == (3, 2)
    assert body["results"][4]["result"]["content"][0]["text"] == "last"
    assert body["results"][1]["error"]["closest"] == []  # no tool of t is named anything like `nope`
    assert body["results"][2]["error"]["errors"][0]["pointer"] == "/text"
    assert elapsed < 1.9  # the two 1 s sleeps overlapped (in turn they take 2 s; the margin absorbs a loaded machine)
    assert too_many.status_code == 422
    assert sorted(r.status for r in rows) == ["invalid_arguments", "not_found", "ok", "ok", "ok"]


@pytest.mark.postgres
async def test_200_concurrent_calls_leave_200_rows(tmp_path: Path, database_url: str) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}, database_url=database_url) as (app, client):
        responses = await asyncio.gather(
            *(client.post("/execute", json={"name": "t__echo", "arguments": {"text": f"call {i}"}}) for i in range(200))
        )
        texts = {r.json()["content"][0]["text"] for r in responses}
    assert all(r.status_code == 200 for r in responses)
    assert texts == {f"call {i}" for i in range(200)}
    # After the lifespan: shutdown wrote every row.
    reopened = create_app(app.state.resources.settings, embedder=HashingEmbedder())
    resources = reopened.state.resources
    from service.resources import close_resources, start_resources

    await start_resources(resources)
    try:
        async with resources.session() as session:
            count = await session.scalar(select(func.count()).select_from(Execution))
            ids = set((await session.scalars(select(Execution.id))).all())
            statuses = set((await session.scalars(select(Execution.status))).all())
    finally:
        await close_resources(resources)
    assert count == 200
    assert ids == {r.json()["execution_id"] for r in responses}
    assert statuses == {"ok"}


async def test_clean_shutdown_drains_calls_in_flight_and_logs_them(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, client):
        calls = [
            asyncio.create_task(client.post("/execute", json={"name": "t__sleep", "arguments": {"seconds": 1}}))
            for _ in range(5)
        ]
        await asyncio.sleep(0.3)
        assert get_gateway(app.state.resources).executor.in_flight == 5
        resources = app.state.resources
        session_factory = resources.sessionmaker
    # The lifespan has ended: the calls finished during shutdown and their rows are in the database.
    responses = await asyncio.gather(*calls)
    assert [r.status_code for r in responses] == [200] * 5
    assert all(r.json()["content"][0]["text"] == "slept 1.0" for r in responses)
    from service.db.engine import create_engine_for, create_sessionmaker

    engine = create_engine_for(resources.settings.database_url)
    try:
        async with create_sessionmaker(engine)() as session:
            rows = (await session.scalars(select(Execution))).all()
    finally:
        await engine.dispose()
    assert session_factory is not None
    assert sorted(r.id for r in rows) == sorted(r.json()["execution_id"] for r in responses)
    assert {r.status for r in rows} == {"ok"}


async def test_a_tool_without_a_live_server_is_502(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, client):
        registered = await client.post(
            "/tools",
            json={
                "tools": [
                    {
                        "server": "offline",
                        "name": "ping",
                        "description": "Ping a host",
                        "input_schema": {"type": "object"},
                    }
                ]
            },
        )
        assert registered.status_code == 200
        response = await client.post("/execute", json={"name": "offline__ping"})
        rows = await executions(app)
    assert response.status_code == 502
    assert "without a connection" in response.json()["detail"]
    assert rows[0].status == "upstream_error"


async def test_servers_can_be_added_refreshed_and_removed(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, client):
        added = await client.post("/servers", json={"id": "paged", **stdio_entry("paged", "5")})
        assert added.status_code == 201, added.text
        view = added.json()
        assert view["tools"] == 5 and view["state"] == "ready" and view["source"] == "api"
        assert view["health"]["pid"] > 0 and view["config"]["command"] == sys.executable

        duplicate = await client.post("/servers", json={"id": "paged", **stdio_entry("paged", "5")})
        assert duplicate.status_code == 409

        call = await client.post("/execute", json={"name": "paged__tool_4", "arguments": {"x": 7}})
        assert call.json()["content"] == [{"type": "text", "text": "tool_4:7"}]

        refreshed = await client.post("/servers/paged/refresh")
        assert refreshed.status_code == 200
        assert refreshed.json()["sync"] | {"tools": None} == {
            "created": 0,
            "updated": 0,
            "unchanged": 5,
            "removed": 0,
            "errors": [],
            "warnings": [],
            "held": [],
            "tools": None,
        }

        listed = {s["id"]: s for s in (await client.get("/servers")).json()["servers"]}
        assert set(listed) == {"t", "paged"}
        assert listed["t"]["health"]["state"] == "ready" and listed["t"]["tools"] == 7

        removed = await client.delete("/servers/paged")
        assert removed.status_code == 200
        assert sorted(removed.json()["removed_tools"]) == [f"paged__tool_{i}" for i in range(5)]
        gone = await client.post("/execute", json={"name": "paged__tool_1"})
        assert gone.status_code == 404

        broken = await client.post("/servers", json={"id": "broken", "command": "/nonexistent/mcp-server"})
        assert broken.status_code == 502
        assert "command not found" in broken.json()["detail"]
        bad = await client.post("/servers", json={"id": "bad", "url": "ftp://example"})
        assert bad.status_code == 422
        assert bad.json()["errors"] == [{"pointer": "/body/url", "reason": "must be an http:// or https:// URL"}]
        listed = {s["id"] for s in (await client.get("/servers")).json()["servers"]}
    assert listed == {"t"}


async def test_servers_added_over_the_api_come_back_after_a_restart(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (_, client):
        assert (await client.post("/servers", json={"id": "paged", **stdio_entry("paged", "3")})).status_code == 201
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (_, client):
        servers = {s["id"]: s for s in (await client.get("/servers")).json()["servers"]}
        call = await client.post("/execute", json={"name": "paged__tool_2", "arguments": {"x": 1}})
    assert servers["paged"]["state"] == "ready" and servers["paged"]["tools"] == 3
    assert call.json()["content"][0]["text"] == "tool_2:1"


async def test_a_server_dropped_from_the_file_leaves_the_catalog(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio"), "p": stdio_entry("paged", "2")}) as (_, client):
        assert (await client.get("/tools/p__tool_0")).status_code == 200
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (_, client):
        assert (await client.get("/tools/p__tool_0")).status_code == 404
        servers = {s["id"] for s in (await client.get("/servers")).json()["servers"]}
    assert servers == {"t"}


async def test_stored_results_expire(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}, result_token_budget=50) as (app, client):
        body = (await client.post("/execute", json={"name": "t__big", "arguments": {"lines": 100}})).json()
        store = get_gateway(app.state.resources).results
        assert await store.purge(ttl_hours=1) == 0
        assert await store.purge(ttl_hours=0) == 1
        async with app.state.resources.session() as session:
            assert await session.get(StoredResult, body["result_id"]) is None
