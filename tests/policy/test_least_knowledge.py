"""Least knowledge, attacked through the surfaces the other policy tests leave out: a caller with a restricted key
never learns that a tool it may not use exists (MCP sessions shared in Redis, approvals, readiness, learning)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import mcp.types as types
from mcp import Client
from policy_world import FORBIDDEN_FOR_DEV, bearer, make_settings

from service.db.models import Execution, Search
from service.mcp.server import create_frontend
from service.resources import Resources
from service.usage.learning import refresh_stats
from tests.security.conftest import serving

REDIS_URL = "redis://127.0.0.1:6379/0"


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_dynamic_sessions_in_redis_are_not_shared_across_api_keys(world: dict[str, Any], tmp_path: Any) -> None:
    """Two front ends on one Redis, one with the admin's key and one with a restricted key: the same client name
    (no HTTP key, no session id) must not see on the restricted one what a search activated on the other."""
    prefix = f"toolscout-test-{uuid.uuid4().hex[:8]}"

    def frontend(key: str) -> Any:
        settings = make_settings(tmp_path, permissions=None)
        settings.frontend.api_key = key
        settings.frontend.redis_url = REDIS_URL
        settings.cluster.key_prefix = prefix
        transport = httpx.ASGITransport(app=world["app"])
        return create_frontend(settings, mode="dynamic", transport="http", api_transport=transport)

    admin_front, dev_front = frontend(world["admin"]), frontend(world["dev"])
    client = types.Implementation(name="agent", version="1")
    async with (
        admin_front.running(),
        dev_front.running(),
        Client(admin_front.server, mode="auto", client_info=client) as on_admin,
        Client(dev_front.server, mode="auto", client_info=client) as on_dev,
    ):
        assert admin_front.sessions.shared is not None
        found = json.loads(
            text_of(await on_admin.call_tool("search_tools", {"query": "read a secret from the vault", "k": 3}))
        )
        assert {t["name"] for t in found["tools"]} & FORBIDDEN_FOR_DEV  # the admin activated forbidden tools
        listed = await on_dev.list_tools(cache_mode="bypass")
        names = {t.name for t in listed.tools}
        assert not names & FORBIDDEN_FOR_DEV, names & FORBIDDEN_FOR_DEV
        assert "vault" not in json.dumps([t.model_dump(mode="json") for t in listed.tools])
        status = json.loads(text_of(await on_dev.call_tool("status", {})))
        assert status["active_tools"] == []
        # The admin's own session is untouched: the same client name still sees its activations there.
        again = {t.name for t in (await on_admin.list_tools(cache_mode="bypass")).tools}
        assert {t["name"] for t in found["tools"]} <= again


async def test_a_callers_own_approvals_name_only_tools_it_may_use(world: dict[str, Any]) -> None:
    """An approver may grant in advance a call of a tool the caller may not use: the caller's own approvals (list,
    lookup, and the refusal of a mismatched approval) must not name that tool."""
    http, dev, approver = world["http"], world["dev"], world["approver"]
    forbidden = await http.post(
        "/approvals", json={"caller": "dev-agent", "tool": "vault__get_secret"}, headers=bearer(approver)
    )
    visible = await http.post(
        "/approvals", json={"caller": "dev-agent", "tool": "util__format_date"}, headers=bearer(approver)
    )
    assert forbidden.status_code == visible.status_code == 200
    hidden_id, visible_id = forbidden.json()["id"], visible.json()["id"]
    listed = await http.get("/approvals", headers=bearer(dev))
    assert [a["id"] for a in listed.json()["approvals"]] == [visible_id]
    assert "vault" not in listed.text
    assert [
        a["id"] for a in (await http.get("/approvals?status=granted", headers=bearer(dev))).json()["approvals"]
    ] == [visible_id]
    # Looked up by id, it is answered like an approval that does not exist.
    hidden = await http.get(f"/approvals/{hidden_id}", headers=bearer(dev))
    missing_id = str(uuid.uuid4())
    missing = await http.get(f"/approvals/{missing_id}", headers=bearer(dev))
    assert hidden.status_code == missing.status_code == 404
    assert json.loads(hidden.text.replace(hidden_id, "<ID>")) == json.loads(missing.text.replace(missing_id, "<ID>"))
    # Used with a tool it was not given for, the refusal does not name the tool it was given for.
    mismatched = await http.post(
        "/execute", json={"name": "util__purge_cache", "approval_id": hidden_id}, headers=bearer(dev)
    )
    assert mismatched.status_code == 403 and "another call" in mismatched.json()["detail"]
    assert "vault" not in mismatched.text
    # Approvers still see every approval.
    everything = (await http.get("/approvals", headers=bearer(approver))).json()["approvals"]
    assert {a["id"] for a in everything} == {hidden_id, visible_id}


async def test_readiness_does_not_count_the_tools_under_restricted_permissions(world: dict[str, Any]) -> None:
    """/readyz needs no key: under a permissions file its count of every tool would tell a restricted caller
    (or anyone) how many tools it cannot see."""
    http, dev = world["http"], world["dev"]
    visible = (await http.get("/tools", headers=bearer(dev))).json()["total"]
    ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["index"] == "ok"
    assert "tools" not in ready.json()["checks"], (visible, ready.json()["checks"])


async def test_the_usage_signal_learns_only_from_the_searchers_own_calls(world: dict[str, Any]) -> None:
    """The usage signal learns a query inside its searcher's permission scope. A call by another caller (other
    roles, other permissions) that names the search's id must not teach that scope anything."""
    http, dev = world["http"], world["dev"]
    resources: Resources = world["resources"]
    query = "turn a timestamp into text"
    at = datetime.now(UTC) - timedelta(minutes=5)
    searches = {caller: str(uuid.uuid4()) for caller in ("dev-agent", "lead")}
    rows: list[Any] = [
        Search(id=search_id, caller="dev-agent", scope="dev", query=query, k=5, created_at=at, results=[])
        for search_id in searches.values()
    ]
    for i, (caller, search_id) in enumerate(searches.items()):
        rows.append(
            Execution(
                id=str(uuid.uuid4()),
                caller=caller,  # "lead" (roles approver, ops) names a search of dev's
                tool="util__format_date" if caller == "dev-agent" else "util__purge_cache",
                server_id="util",
                search_id=search_id,
                arguments_digest="0" * 64,
                status="ok",
                duration_ms=5.0,
                started_at=at + timedelta(seconds=i + 1),
                finished_at=at + timedelta(seconds=i + 1),
            )
        )
    async with resources.session() as session:
        session.add_all(rows)
        await session.commit()
    await refresh_stats(resources)
    assert resources.usage is not None
    assert set(resources.usage.by_scope.get("dev", {})) == {"util__format_date"}  # dev's own call only
    body = (await http.post("/search", json={"query": query, "k": 10, "explain": True}, headers=bearer(dev))).json()
    usage = {r["name"]: r["explain"]["signals"].get("usage", 0.0) for r in body["results"]}
    assert usage["util__format_date"] > 0 and usage["util__purge_cache"] == 0.0


async def test_events_do_not_announce_changes_of_tools_the_caller_may_not_use(world: dict[str, Any]) -> None:
    """dev may use the server `public` but not its delete_* tools: adding or removing one of those must not send
    dev a `tools_changed` (its list did not change; the event alone would say a hidden tool did)."""
    app, admin, dev = world["app"], world["admin"], world["dev"]
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        received: list[str] = []
        done = anyio.Event()

        async def follow() -> None:
            async with http.stream("GET", "/events", headers=bearer(dev)) as stream:
                async for line in stream.aiter_lines():
                    received.append(line)
                    if line.startswith("data:") and len([x for x in received if x.startswith("data:")]) == 2:
                        done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.sleep(0.5)
            hidden = {"server": "public", "name": "delete_everything", "description": "Delete every account"}
            assert (await http.post("/tools", json={"tools": [hidden]}, headers=bearer(admin))).status_code == 200
            assert (await http.delete("/tools/public__delete_account", headers=bearer(admin))).status_code == 204
            visible = {"server": "public", "name": "get_news", "description": "Latest news headlines"}
            assert (await http.post("/tools", json={"tools": [visible]}, headers=bearer(admin))).status_code == 200
            assert (await http.delete("/tools/public__get_news", headers=bearer(admin))).status_code == 204
            with anyio.fail_after(20):
                await done.wait()
            await anyio.sleep(0.3)  # anything sent late would arrive now
            tg.cancel_scope.cancel()
    data = [line for line in received if line.startswith("data:")]
    assert data == ['data: {"server":"public"}'] * 2, received
