"""Permissions and approvals on /execute, batch and stored results against a real MCP server child, and the
learned boosts that explain shows."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from policy_world import bearer, first_key, make_key, make_settings, running

from service.db.models import Execution
from service.resources import Resources
from service.usage.learning import refresh_stats

TEST_SERVER = Path(__file__).resolve().parents[1] / "upstream" / "mcp_test_server.py"
EXECUTE_PERMISSIONS = """
roles:
  dev:
    allow: ["server:t"]
    deny: ["t__pid", "t__crash"]
  ops:
    allow: ["*"]
approver_roles: [approver]
destructive: ["t__echo"]
"""


@asynccontextmanager
async def upstream_world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """A service with the test MCP server `t` and keys for an admin, a dev, an approver and another dev."""
    import json
    import sys

    servers_file = tmp_path / "servers.json"
    servers_file.write_text(
        json.dumps({"mcpServers": {"t": {"command": sys.executable, "args": [str(TEST_SERVER), "stdio"]}}})
    )
    settings = make_settings(tmp_path, EXECUTE_PERMISSIONS)
    settings.execution.servers_file = servers_file
    settings.execution.startup_wait_seconds = 60
    settings.execution.result_token_budget = 50
    async with running(settings) as (app, http):
        admin = await first_key(app, "root", ["admin"])
        keys = {
            "admin": admin,
            "dev": await make_key(http, "dev-agent", ["dev"], admin),
            "dev2": await make_key(http, "other-dev", ["dev"], admin),
            "approver": await make_key(http, "lead", ["approver", "ops"], admin),
        }
        yield {"app": app, "http": http, "resources": app.state.resources, **keys}


async def execute(
    http: httpx.AsyncClient, key: str, name: str, arguments: dict[str, Any] | None = None, **extra: Any
) -> httpx.Response:
    return await http.post("/execute", json={"name": name, "arguments": arguments or {}, **extra}, headers=bearer(key))


@pytest.mark.upstream
async def test_execute_refuses_a_forbidden_tool_by_exact_name_alone_and_in_batch(tmp_path: Path) -> None:
    async with upstream_world(tmp_path) as w:
        http, dev = w["http"], w["dev"]
        refused = await execute(http, dev, "t__pid")
        assert refused.status_code == 404  # answered like a missing tool (issue 9)
        body = refused.json()
        assert body["type"].endswith("/not-found") and "t__pid" in body["detail"]
        assert "content" not in body
        assert (await execute(http, w["approver"], "t__pid")).status_code == 200  # ops may
        batch = await http.post(
            "/execute/batch",
            headers=bearer(dev),
            json={
                "calls": [
                    {"name": "t__pid"},
                    {"name": "t__fail", "arguments": {"reason": "x"}},
                    {"name": "t__crash"},
                ]
            },
        )
        items = batch.json()["results"]
        assert [(i["ok"], i["status"]) for i in items] == [(False, 404), (True, 200), (False, 404)]
        assert items[0]["result"] is None and items[0]["error"]["type"].endswith("/not-found")
        names = {
            r["name"]
            for r in (
                await http.post("/search", json={"query": "t__pid process id", "k": 50}, headers=bearer(dev))
            ).json()["results"]
        }
        assert "t__pid" not in names and "t__crash" not in names and "t__fail" in names


@pytest.mark.upstream
async def test_a_destructive_call_needs_an_approval_that_works_once(tmp_path: Path) -> None:
    async with upstream_world(tmp_path) as w:
        http, dev, approver = w["http"], w["dev"], w["approver"]
        arguments = {"text": "drop the table", "times": 1}
        first = await execute(http, dev, "t__echo", arguments)
        assert first.status_code == 403
        problem = first.json()
        assert problem["type"].endswith("/approval-required")
        approval_id = problem["approval_id"]
        request = problem["approval"]
        assert (request["status"], request["caller"], request["tool"]) == ("pending", "dev-agent", "t__echo")
        assert request["arguments"] == {"text": "***", "times": "***"}  # names only (issue 9)
        assert problem["grant"]["body"] == {"approval_id": approval_id}
        # Asking again gives the same open request rather than a new one.
        assert (await execute(http, dev, "t__echo", arguments)).json()["approval_id"] == approval_id
        not_yet = await execute(http, dev, "t__echo", arguments, approval_id=approval_id)
        assert not_yet.status_code == 403 and "not granted yet" in not_yet.json()["detail"]
        # Only an approver grants, never the requester; the pending list shows it to approvers.
        assert (
            await http.post("/approvals", json={"approval_id": approval_id}, headers=bearer(dev))
        ).status_code == 403
        pending = (await http.get("/approvals?status=pending", headers=bearer(approver))).json()["approvals"]
        assert [a["id"] for a in pending] == [approval_id]
        granted = await http.post("/approvals", json={"approval_id": approval_id}, headers=bearer(approver))
        assert granted.status_code == 200 and granted.json()["status"] == "granted"
        # Bound to the caller and the arguments.
        other = await execute(http, w["dev2"], "t__echo", arguments, approval_id=approval_id)
        assert other.status_code == 403 and other.json()["type"].endswith("/permission-denied")
        changed = await execute(http, dev, "t__echo", {**arguments, "times": 3}, approval_id=approval_id)
        assert changed.status_code == 403 and "another call" in changed.json()["detail"]
        done = await execute(http, dev, "t__echo", arguments, approval_id=approval_id)
        assert done.status_code == 200, done.text
        assert done.json()["content"] == [{"type": "text", "text": "drop the table"}]
        again = await execute(http, dev, "t__echo", arguments, approval_id=approval_id)
        assert again.status_code == 403 and "already used" in again.json()["detail"]
        assert (await http.get(f"/approvals/{approval_id}", headers=bearer(dev))).json()["status"] == "used"


@pytest.mark.upstream
async def test_an_approval_expires_and_works_once_in_a_batch(tmp_path: Path) -> None:
    async with upstream_world(tmp_path) as w:
        http, dev, approver = w["http"], w["dev"], w["approver"]
        short = (
            await http.post(
                "/approvals",
                headers=bearer(approver),
                json={"caller": "dev-agent", "tool": "t__echo", "arguments": {"text": "a"}, "ttl_seconds": 1},
            )
        ).json()
        await asyncio.sleep(1.2)
        expired = await execute(http, dev, "t__echo", {"text": "a"}, approval_id=short["id"])
        assert expired.status_code == 403 and "expired" in expired.json()["detail"]
        grant = (
            await http.post(
                "/approvals",
                headers=bearer(approver),
                json={"caller": "dev-agent", "tool": "t__echo", "arguments": {"text": "b"}},
            )
        ).json()
        call = {"name": "t__echo", "arguments": {"text": "b"}, "approval_id": grant["id"]}
        items = (await http.post("/execute/batch", headers=bearer(dev), json={"calls": [call, call]})).json()["results"]
        assert sorted(i["status"] for i in items) == [200, 403]


@pytest.mark.upstream
async def test_stored_results_stay_with_their_caller(tmp_path: Path) -> None:
    async with upstream_world(tmp_path) as w:
        http = w["http"]
        big = await execute(http, w["dev"], "t__big", {"lines": 200})
        assert big.status_code == 200 and big.json()["truncated"] is True
        result_id = big.json()["result_id"]
        assert (await http.get(f"/results/{result_id}", headers=bearer(w["dev"]))).status_code == 200
        assert (await http.get(f"/results/{result_id}", headers=bearer(w["dev2"]))).status_code == 404
        # Once the caller may no longer use the tool, its stored results are gone for it too.
        path = w["resources"].settings.policy.permissions_file
        path.write_text(
            EXECUTE_PERMISSIONS.replace('deny: ["t__pid", "t__crash"]', 'deny: ["t__pid", "t__crash", "t__big"]')
        )
        w["resources"].policy._checked = 0.0  # skip the two-second debounce of file checks
        os.utime(path, (1e9, 1e9))
        gone = await http.get(f"/results/{result_id}", headers=bearer(w["dev"]))
        assert gone.status_code == 404 and gone.json()["type"].endswith("/not-found")
        assert (await http.get(f"/results/{result_id}", headers=bearer(w["admin"]))).status_code == 200


async def test_search_explain_shows_the_learned_boosts(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    resources: Resources = world["resources"]
    start = datetime.now(UTC) - timedelta(hours=1)
    plan = [("dev-agent", "util__format_date", "ok")] * 10 + [("dev-agent", "util__purge_cache", "tool_error")] * 30
    plan += [("someone-else", "public__get_weather", "ok")] * 20  # another caller of role dev
    async with resources.session() as session:
        session.add_all(
            Execution(
                id=str(uuid.uuid4()),
                caller=caller,
                tool=tool,
                server_id=tool.split("__")[0],
                arguments_digest="0" * 64,
                status=status,
                duration_ms=20.0,
                started_at=start + timedelta(seconds=i),
                finished_at=start + timedelta(seconds=i),
                scope="dev",
            )
            for i, (caller, tool, status) in enumerate(plan)
        )
        await session.commit()
    assert await refresh_stats(resources) == len(plan)
    body = (
        await http.post(
            "/search",
            headers=bearer(dev),
            json={"query": "format a date, purge the cache, weather forecast", "k": 50, "explain": True},
        )
    ).json()
    boosts = {r["name"]: r["explain"]["boosts"] for r in body["results"]}
    assert boosts["util__format_date"]["caller_habit"] > 0.04 and boosts["util__format_date"]["popularity"] > 0
    assert boosts["util__purge_cache"]["reliability"] < -0.07
    assert "caller_habit" not in boosts["public__get_weather"] and boosts["public__get_weather"]["popularity"] > 0
    assert boosts["util__drop_table"] == {}  # no history, no boost
    for result in body["results"]:
        explained = sum(result["explain"]["signals"].values()) + sum(result["explain"]["boosts"].values())
        assert abs(result["score"] - explained) < 1e-3
    # A caller of other roles gets none of it: the popularity and reliability are learned per scope, the habit per
    # caller.
    other = (
        await http.post(
            "/search",
            headers=bearer(world["admin"]),
            json={"query": "format a date, purge the cache, weather forecast", "k": 50, "explain": True},
        )
    ).json()
    assert all(r["explain"]["boosts"] == {} for r in other["results"])
