"""The popularity and reliability boosts are learned per permission scope (the caller's sorted roles): a caller's
scores and `explain` never move with the calls of a caller of other roles, and callers of the same roles share
them, each caller's part capped. Real calls over REST /execute to a real MCP server child, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from policy_world import bearer, first_key, make_key, make_settings, running

from service.usage.learning import popularity_boost, refresh_stats, reliability_penalty

TEST_SERVER = Path(__file__).resolve().parents[1] / "upstream" / "mcp_test_server.py"
PERMISSIONS = """
roles:
  dev:
    allow: ["server:t"]
    deny: ["t__pid", "t__crash"]
"""
QUERY = "fail on purpose with a tool error"


@asynccontextmanager
async def shared_tool_world(tmp_path: Path, database_url: str) -> AsyncIterator[dict[str, Any]]:
    """The test MCP server `t`; an admin, and two callers of role dev who may use `t__fail` too."""
    servers_file = tmp_path / "servers.json"
    servers_file.write_text(
        json.dumps({"mcpServers": {"t": {"command": sys.executable, "args": [str(TEST_SERVER), "stdio"]}}})
    )
    settings = make_settings(tmp_path, PERMISSIONS)
    settings.db.url = database_url
    settings.execution.servers_file = servers_file
    settings.execution.startup_wait_seconds = 60
    async with running(settings) as (app, http):
        admin = await first_key(app, "root", ["admin"])
        yield {
            "http": http,
            "resources": app.state.resources,
            "admin": admin,
            "dev": await make_key(http, "dev-agent", ["dev"], admin),
            "dev2": await make_key(http, "other-dev", ["dev"], admin),
        }


async def explained(http: httpx.AsyncClient, key: str, name: str = "t__fail") -> dict[str, Any]:
    """The score and explain of one tool in the caller's ranking of QUERY."""
    response = await http.post("/search", json={"query": QUERY, "k": 10, "explain": True}, headers=bearer(key))
    assert response.status_code == 200, response.text
    result = next(r for r in response.json()["results"] if r["name"] == name)
    return {"score": result["score"], "explain": result["explain"]}


async def fail_calls(http: httpx.AsyncClient, key: str, times: int) -> None:
    for _ in range(times):
        response = await http.post("/execute", json={"name": "t__fail", "arguments": {}}, headers=bearer(key))
        assert response.status_code == 200 and response.json()["status"] == "tool_error", response.text


@pytest.mark.upstream
async def test_another_scopes_failing_calls_move_none_of_a_callers_scores(tmp_path: Path, database_url: str) -> None:
    async with shared_tool_world(tmp_path, database_url) as w:
        http, resources = w["http"], w["resources"]
        dev_before = await explained(http, w["dev"])
        assert dev_before["explain"]["boosts"] == {}
        await fail_calls(http, w["admin"], 30)
        await refresh_stats(resources)
        admin_after = (await explained(http, w["admin"]))["explain"]["boosts"]
        assert admin_after["reliability"] < -0.5 and admin_after["popularity"] > 0.02  # the admin's own scope learned
        # 30 failing calls by the admin: the dev's score and explain of the shared tool are exactly as before.
        assert await explained(http, w["dev"]) == dev_before
        assert await explained(http, w["dev2"]) == dev_before

        # The dev's own failing calls move its own view in full; the other dev (same roles) shares them up to
        # learning.shared_calls_per_caller (usage/shares.py), and the admin's scope not at all.
        await fail_calls(http, w["dev"], 10)
        await refresh_stats(resources)
        dev_after = (await explained(http, w["dev"]))["explain"]["boosts"]
        assert dev_after["reliability"] < -0.5 and dev_after["popularity"] > 0.015
        assert "caller_habit" not in dev_after  # failures are no habit
        cap, learning = resources.settings.learning.shared_calls_per_caller, resources.settings.learning
        assert (await explained(http, w["dev2"]))["explain"]["boosts"] == {
            "popularity": pytest.approx(popularity_boost(cap, learning), abs=1e-3),
            "reliability": pytest.approx(reliability_penalty(0, cap, learning), abs=1e-3),
        }
        assert (await explained(http, w["admin"]))["explain"]["boosts"] == admin_after
        async with resources.session() as session:
            logged = (await session.execute(sa.text("SELECT scope, count(*) FROM executions GROUP BY scope"))).all()
            learned = (await session.execute(sa.text("SELECT scope, tool, calls FROM scope_tool_stats"))).all()
            every = (await session.execute(sa.text("SELECT tool, calls FROM tool_stats"))).all()
        assert sorted(map(tuple, logged)) == [("admin", 30), ("dev", 10)]
        assert sorted(map(tuple, learned)) == [("admin", "t__fail", 30), ("dev", "t__fail", 10)]
        assert [tuple(row) for row in every] == [("t__fail", 40)]  # the analytics still count every call
