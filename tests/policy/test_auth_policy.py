"""Keys, permissions, approvals and rate limits over HTTP: nothing a caller may not use leaks through search,
tools, execute, batch, results or analytics."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from policy_world import (
    FORBIDDEN_FOR_DEV,
    PERMISSIONS,
    VISIBLE_TO_DEV,
    bearer,
    first_key,
    make_key,
    make_settings,
    running,
)

from service.db.models import Execution, Search
from service.resources import Resources
from service.usage.learning import refresh_stats


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
    from service.policy.callers import Caller
    from service.policy.permissions import parse_permissions
    from service.policy.service import permission_filter, policy_state

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
    state = resources.policy
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
    # Tools no search returned count the reader's own calls: someone else's call of a tool it may use is not its.
    assert {t["tool"]: t["calls"] for t in never["tools"]}["util__format_date"] == 0
    assert (await http.get("/analytics/tools?caller=someone-else", headers=bearer(dev))).status_code == 403
    # The admin sees every caller and tool.
    everything = (await http.get("/analytics/tools", headers=bearer(admin))).json()["tools"]
    assert {t["tool"] for t in everything} == {
        "public__get_weather",
        "vault__get_secret",
        "payroll__get_salary",
        "util__format_date",
    }
    never_admin = (await http.get("/analytics/tools/never-found", headers=bearer(admin))).json()["tools"]
    assert {t["tool"]: t["calls"] for t in never_admin}["util__format_date"] == 1
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
