"""Keys, permissions, approvals and rate limits over HTTP: nothing a caller may not use leaks through search,
tools, execute, batch, results or analytics."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from indexer.embedding import HashingEmbedder
from service import auth
from service.db.models import Execution, Search
from service.learning import refresh_stats
from service.main import create_app
from service.resources import Resources
from service.settings import Settings

PERMISSIONS = """
roles:
  dev:
    allow: ["server:public", "util__*", "vault__*"]
    deny: ["*delete*", "server:vault"]
  ops:
    allow: ["*"]
approver_roles: [approver]
destructive: ["util__purge_*"]
"""

TOOLS = [
    {"server": "public", "name": "get_weather", "description": "Weather forecast for a city"},
    {"server": "public", "name": "delete_account", "description": "Delete a user account for good"},
    {"server": "util", "name": "format_date", "description": "Format a date"},
    {"server": "util", "name": "purge_cache", "description": "Purge the cache"},
    {
        "server": "util",
        "name": "drop_table",
        "description": "Drop a database table",
        "annotations": {"destructiveHint": True},
    },
    {"server": "vault", "name": "get_secret", "description": "Read a secret from the vault"},
    {"server": "vault", "name": "list_secrets", "description": "List the secrets in the vault"},
    {"server": "payroll", "name": "get_salary", "description": "Read the salary of an employee"},
]
FORBIDDEN_FOR_DEV = {
    "public__delete_account",
    "vault__get_secret",
    "vault__list_secrets",
    "payroll__get_salary",
}
VISIBLE_TO_DEV = {"public__get_weather", "util__format_date", "util__purge_cache", "util__drop_table"}


def make_settings(tmp_path: Path, permissions: str | None = PERMISSIONS, **policy: Any) -> Settings:
    settings = Settings(data_dir=tmp_path, demo_catalog=False)
    settings.execution.demo_servers = False
    settings.learning.refresh_lag_seconds = 0.0
    if permissions is not None:
        path = tmp_path / "permissions.yaml"
        path.write_text(permissions)
        settings.policy.permissions_file = path
    for key, value in policy.items():
        setattr(settings.policy, key, value)
    return settings


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield app, http


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def first_key(app: FastAPI, caller: str, roles: list[str]) -> str:
    """A key made the CLI's way (`toolscout keys create`): POST /keys always needs an admin key (issue 9)."""
    resources: Resources = app.state.resources
    async with resources.session() as session:
        created = await auth.create_key(session, caller, roles)
        await session.commit()
    auth.key_resolver(resources).invalidate()
    return created.key


async def make_key(http: httpx.AsyncClient, caller: str, roles: list[str], admin: str | None = None) -> str:
    response = await http.post("/keys", json={"caller": caller, "roles": roles}, headers=bearer(admin) if admin else {})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["key"].startswith("tsk_") and body["caller"] == caller and body["roles"] == sorted(roles)
    return str(body["key"])


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """A service with the permissions file, the tools, and keys for an admin, a dev and an approver."""
    async with running(make_settings(tmp_path)) as (app, http):
        admin = await first_key(app, "root", ["admin"])  # the first key ends open mode
        assert (await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))).status_code == 200
        dev = await make_key(http, "dev-agent", ["dev"], admin)
        approver = await make_key(http, "lead", ["approver", "ops"], admin)
        yield {
            "app": app,
            "http": http,
            "admin": admin,
            "dev": dev,
            "approver": approver,
            "resources": app.state.resources,
        }


async def test_open_mode_until_the_first_key_then_401(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING")
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        assert "No API key configured" in caplog.text
        assert (await http.post("/search", json={"query": "anything"})).status_code == 200
        admin = await first_key(app, "root", ["admin"])
        refused = await http.post("/search", json={"query": "anything"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["type"].endswith("/unauthorized")
        assert (await http.post("/search", json={"query": "x"}, headers=bearer("tsk_wrong"))).status_code == 401
        assert (await http.get("/healthz")).status_code == 200  # health needs no key
        assert (await http.post("/search", json={"query": "x"}, headers=bearer(admin))).status_code == 200
        assert (await http.post("/search", json={"query": "x"}, headers={"X-API-Key": admin})).status_code == 200
        keys = (await http.get("/keys", headers=bearer(admin))).json()["keys"]
        assert [(k["caller"], k["roles"]) for k in keys] == [("root", ["admin"])]
        assert "key" not in keys[0] and "key_hash" not in keys[0]
        other = await make_key(http, "tmp", [], admin)
        other_id = next(
            k["id"] for k in (await http.get("/keys", headers=bearer(admin))).json()["keys"] if k["caller"] == "tmp"
        )
        assert (await http.get("/keys", headers=bearer(other))).status_code == 403  # not an admin
        assert (await http.delete(f"/keys/{other_id}", headers=bearer(admin))).json()["revoked_at"]
        assert (await http.post("/search", json={"query": "x"}, headers=bearer(other))).status_code == 401
        # Revoking every key does not reopen the service.
        admin_id = next(k["id"] for k in (await http.get("/keys", headers=bearer(admin))).json()["keys"])
        assert (await http.delete(f"/keys/{admin_id}", headers=bearer(admin))).status_code == 200
        assert (await http.post("/search", json={"query": "x"})).status_code == 401
        assert (await http.post("/search", json={"query": "x"}, headers=bearer(admin))).status_code == 401


async def test_keys_survive_a_restart_and_are_stored_hashed(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None)
    async with running(settings) as (app, http):
        admin = await first_key(app, "root", ["admin"])
        resources: Resources = app.state.resources
        async with resources.session() as session:
            from sqlalchemy import select

            from service.db.models import ApiKey

            stored = (await session.scalars(select(ApiKey))).all()
        assert len(stored) == 1 and admin not in (stored[0].key_hash, stored[0].prefix)
        assert admin.startswith(stored[0].prefix)
    async with running(settings) as (_app, http):
        assert (await http.post("/search", json={"query": "x"})).status_code == 401
        assert (await http.post("/search", json={"query": "x"}, headers=bearer(admin))).status_code == 200


async def test_search_never_returns_a_forbidden_tool(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    queries = (
        [name for name in FORBIDDEN_FOR_DEV]
        + [name.split("__")[1] for name in FORBIDDEN_FOR_DEV]
        + ["delete account", "secret vault", "salary", "get", "the", "read a secret from the vault"]
    )
    for query in queries:
        response = await http.post("/search", json={"query": query, "k": 50, "explain": True}, headers=bearer(dev))
        assert response.status_code == 200
        names = {r["name"] for r in response.json()["results"]}
        assert names <= VISIBLE_TO_DEV, (query, names & FORBIDDEN_FOR_DEV)
    first = (await http.post("/search", json={"query": "format a date", "k": 50}, headers=bearer(dev))).json()
    assert first["results"][0]["name"] == "util__format_date"
    assert {r["name"] for r in first["results"]} == VISIBLE_TO_DEV
    # Asking for a forbidden server explicitly gives nothing rather than an error that confirms it.
    body = (
        await http.post("/search", json={"query": "secret", "k": 50, "servers": ["vault"]}, headers=bearer(dev))
    ).json()
    assert body["results"] == []
    # The admin sees everything, the exact name first.
    admin_body = (
        await http.post("/search", json={"query": "vault__get_secret", "k": 50}, headers=bearer(world["admin"]))
    ).json()
    assert admin_body["results"][0]["name"] == "vault__get_secret"
    assert {r["name"] for r in admin_body["results"]} == VISIBLE_TO_DEV | FORBIDDEN_FOR_DEV


async def test_tools_listing_and_lookup_hide_forbidden_tools(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    listed = (await http.get("/tools", params={"limit": 1000}, headers=bearer(dev))).json()
    assert {t["name"] for t in listed["tools"]} == VISIBLE_TO_DEV and listed["total"] == 4
    assert (await http.get("/tools/vault__get_secret", headers=bearer(dev))).status_code == 404
    assert (await http.get("/tools/util__format_date", headers=bearer(dev))).status_code == 200


async def test_a_tool_registered_later_follows_the_rules_at_once(world: dict[str, Any]) -> None:
    http, dev, admin = world["http"], world["dev"], world["admin"]
    new = [
        {"server": "vault", "name": "rotate_keys", "description": "Rotate the vault keys"},
        {"server": "public", "name": "get_news", "description": "Latest news headlines"},
    ]
    assert (await http.post("/tools", json={"tools": new}, headers=bearer(admin))).status_code == 200
    names = {
        r["name"]
        for r in (
            await http.post(
                "/search",
                json={"query": "vault__rotate_keys latest news headlines rotate the vault keys", "k": 50},
                headers=bearer(dev),
            )
        ).json()["results"]
    }
    assert "public__get_news" in names and "vault__rotate_keys" not in names


async def test_names_newer_than_the_snapshot_pass_on_tool_patterns_only(world: dict[str, Any]) -> None:
    """Between a registration and the snapshot refresh a new name's server is unknown: it is let through
    only by a tool-name pattern, and not at all when a server rule could deny it."""
    from indexer.index.base import SearchFilter
    from service.auth import Caller
    from service.permissions import parse_permissions
    from service.policy import permission_filter, policy_state

    resources: Resources = world["resources"]
    state = policy_state(resources)
    assert resources.retriever is not None
    resources.retriever.directory.add("util__new_tool", "new_tool", "util", ())
    resources.retriever.directory.add("public__new_tool", "new_tool", "public", ())
    dev = Caller("dev-agent", frozenset({"dev"}), "k")
    assert "util__new_tool" not in state.servers
    assert "util__new_tool" not in (permission_filter(resources, dev, SearchFilter()).allowed or set())
    # Without a server deny rule, the tool pattern util__* lets the new util tool through.
    state.permissions = parse_permissions(
        {"roles": {"dev": {"allow": ["server:public", "util__*"], "deny": ["*delete*"]}}}
    )
    state._allowed.clear()
    allowed = permission_filter(resources, dev, SearchFilter()).allowed or set()
    assert "util__new_tool" in allowed and "public__new_tool" not in allowed


async def test_a_permissions_file_change_applies_without_restart(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    resources: Resources = world["resources"]
    path = resources.settings.policy.permissions_file
    assert path is not None
    path.write_text(PERMISSIONS.replace('"server:public", ', ""))
    state = resources.extras["policy"]
    state._checked = 0.0  # skip the two-second debounce of file checks
    import os

    os.utime(path, (1e9, 1e9))
    names = {
        r["name"]
        for r in (await http.post("/search", json={"query": "weather", "k": 50}, headers=bearer(dev))).json()["results"]
    }
    assert "public__get_weather" not in names and names <= VISIBLE_TO_DEV
    path.write_text("roles: [broken")  # a broken edit keeps the rules in force
    state._checked = 0.0
    os.utime(path, (2e9, 2e9))
    names = {
        r["name"]
        for r in (await http.post("/search", json={"query": "format date", "k": 50}, headers=bearer(dev))).json()[
            "results"
        ]
    }
    assert names == {"util__format_date", "util__purge_cache", "util__drop_table"}


async def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, rate_limit_per_minute=60, rate_limit_burst=3)
    async with running(settings) as (_app, http):
        codes = [(await http.post("/search", json={"query": "x"})).status_code for _ in range(3)]
        assert codes == [200, 200, 200]
        limited = await http.post("/search", json={"query": "x"})
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "1"
        body = limited.json()
        assert body["type"].endswith("/rate-limited") and 0 < body["retry_after"] <= 1.0
        await asyncio.sleep(1.05)
        assert (await http.post("/search", json={"query": "x"})).status_code == 200


async def test_rate_limits_are_per_key(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, rate_limit_per_minute=1, rate_limit_burst=2)
    async with running(settings) as (app, http):
        admin = await first_key(app, "root", ["admin"])
        other = await make_key(http, "other", [], admin)  # admin key: 1 of 2
        assert (await http.post("/search", json={"query": "x"}, headers=bearer(admin))).status_code == 200
        assert (await http.post("/search", json={"query": "x"}, headers=bearer(admin))).status_code == 429
        assert (await http.post("/search", json={"query": "x"}, headers=bearer(other))).status_code == 200


async def test_analytics_show_a_non_admin_only_its_rows_and_permitted_tools(world: dict[str, Any]) -> None:
    http, dev, admin = world["http"], world["dev"], world["admin"]
    resources: Resources = world["resources"]
    now = datetime.now(UTC) - timedelta(minutes=10)
    search_id = str(uuid.uuid4())
    rows: list[Any] = [
        Search(
            id=search_id,
            caller="dev-agent",
            query="weather then secrets",
            k=5,
            created_at=now,
            results=[{"name": "public__get_weather", "score": 1.0}],
            result_count=1,
        )
    ]
    for i, (caller, tool, status) in enumerate(
        [
            ("dev-agent", "public__get_weather", "ok"),
            ("dev-agent", "vault__get_secret", "ok"),
            ("dev-agent", "public__get_weather", "tool_error"),
            ("dev-agent", "payroll__get_salary", "denied"),
            ("someone-else", "util__format_date", "ok"),
            ("someone-else", "public__get_weather", "ok"),
        ]
    ):
        at = now + timedelta(seconds=10 * i)
        rows.append(
            Execution(
                id=str(uuid.uuid4()),
                caller=caller,
                tool=tool,
                server_id=tool.split("__")[0],
                search_id=search_id if i == 0 else None,
                arguments_digest="0" * 64,
                status=status,
                duration_ms=10.0 * (i + 1),
                started_at=at,
                finished_at=at,
            )
        )
    async with resources.session() as session:
        session.add_all(rows)
        await session.commit()
    await refresh_stats(resources)  # the background refresh would fold them within seconds
    seen: list[Any] = []
    for path in (
        "/analytics/tools",
        "/analytics/timeseries?bucket=day",
        "/analytics/callers",
        "/analytics/cooccurrence",
        "/analytics/conversion",
        "/analytics/searches/unanswered?kind=no_call",
        "/analytics/tools/never-found",
    ):
        response = await http.get(path, headers=bearer(dev))
        assert response.status_code == 200, (path, response.text)
        seen.append(response.json())
        text = response.text
        for forbidden in FORBIDDEN_FOR_DEV | {"someone-else"}:
            assert forbidden not in text, (path, forbidden)
    tools, series, callers, pairs, funnel, _unanswered, never = seen
    assert [(t["tool"], t["calls"], t["successes"]) for t in tools["tools"]] == [("public__get_weather", 2, 1)]
    assert sum(b["calls"] for b in series["series"]) == 2
    # Hourly series have no tool dimension: a caller sees the total of its own calls, names of none.
    hourly = await http.get("/analytics/timeseries?bucket=hour", headers=bearer(dev))
    assert sum(b["calls"] for b in hourly.json()["series"]) == 4
    assert not any(name in hourly.text for name in FORBIDDEN_FOR_DEV | {"someone-else"})
    assert [(c["caller"], c["calls"]) for c in callers["callers"]] == [("dev-agent", 2)]
    assert pairs["pairs"] == []
    assert (funnel["searches"], funnel["searches_followed_by_call"], funnel["calls"]) == (1, 1, 2)
    assert {t["tool"] for t in never["tools"]} <= VISIBLE_TO_DEV
    assert (await http.get("/analytics/tools?caller=someone-else", headers=bearer(dev))).status_code == 403
    # The admin sees every caller and tool.
    everything = (await http.get("/analytics/tools", headers=bearer(admin))).json()["tools"]
    assert {t["tool"] for t in everything} == {
        "public__get_weather",
        "vault__get_secret",
        "payroll__get_salary",
        "util__format_date",
    }
    mine = (await http.get("/analytics/callers?caller=someone-else", headers=bearer(admin))).json()["callers"]
    assert [(c["caller"], c["calls"]) for c in mine] == [("someone-else", 2)]


async def test_only_approvers_grant_and_each_sees_what_it_may(world: dict[str, Any]) -> None:
    http, dev, approver = world["http"], world["dev"], world["approver"]
    granted = await http.post(
        "/approvals",
        json={"caller": "dev-agent", "tool": "util__drop_table", "arguments": {"table": "t"}},
        headers=bearer(dev),
    )
    assert granted.status_code == 403
    advance = await http.post(
        "/approvals",
        json={
            "caller": "dev-agent",
            "tool": "util__drop_table",
            "arguments": {"table": "t"},
            "ttl_seconds": 60,
        },
        headers=bearer(approver),
    )
    assert advance.status_code == 200
    approval = advance.json()
    assert approval["status"] == "granted" and approval["granted_by"] == "lead"
    assert approval["arguments"] == {"table": "***"}  # names only, values bound by the digest (issue 9)
    expires = datetime.fromisoformat(approval["expires_at"])
    assert timedelta(seconds=55) < expires - datetime.now(UTC) <= timedelta(seconds=60)
    assert (await http.get(f"/approvals/{approval['id']}", headers=bearer(dev))).json()["id"] == approval["id"]
    listed = (await http.get("/approvals?status=granted", headers=bearer(dev))).json()["approvals"]
    assert [a["id"] for a in listed] == [approval["id"]]
    self_grant = await http.post(
        "/approvals", json={"caller": "lead", "tool": "util__drop_table"}, headers=bearer(approver)
    )
    assert self_grant.status_code == 403
    assert (await http.post("/approvals", json={"tool": "x"}, headers=bearer(approver))).status_code == 422
    denied = await http.post(f"/approvals/{approval['id']}/deny", headers=bearer(approver))
    assert denied.json()["status"] == "denied"
    again = await http.post("/approvals", json={"approval_id": approval["id"]}, headers=bearer(approver))
    assert again.status_code == 409
    assert (await http.get(f"/approvals/{uuid.uuid4()}", headers=bearer(dev))).status_code == 404


# --- /execute, batch and results against a real MCP server child -------------------------------------

TEST_SERVER = Path(__file__).resolve().parents[1] / "integration" / "mcp_test_server.py"
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
        assert request["arguments"] == {"text": "***", "times": "***"} and problem["grant"]["body"] == {"approval_id": approval_id}
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


async def test_search_explain_shows_the_learned_boosts(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    resources: Resources = world["resources"]
    start = datetime.now(UTC) - timedelta(hours=1)
    plan = [("dev-agent", "util__format_date", "ok")] * 10 + [("dev-agent", "util__purge_cache", "tool_error")] * 30
    plan += [("someone-else", "public__get_weather", "ok")] * 20
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
    # Another caller gets the popularity and reliability, not dev's habit.
    other = (
        await http.post(
            "/search",
            headers=bearer(world["admin"]),
            json={"query": "format a date", "k": 50, "explain": True},
        )
    ).json()
    assert "caller_habit" not in {r["name"]: r for r in other["results"]}["util__format_date"]["explain"]["boosts"]
