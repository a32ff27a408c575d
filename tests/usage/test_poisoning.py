"""Ranking poisoning from inside a permission scope: two callers of the same roles share what their scope learns,
but one of them cannot move the other's ranking beyond a small bound, while its own view still learns in full.

(a) caller A makes 40 calls of B's first result with arguments that do not fit its schema;
(b) caller A searches "delete all my files" 32 times and each time calls a harmless, unrelated tool.
Real calls over REST /search and /execute to real MCP server children, the real model, SQLite and PostgreSQL; with
the per-caller caps switched off the same attacks do move B's ranking (the caps are what holds)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.embedding import SentenceTransformerEmbedder
from service.main import create_app
from service.settings import LearningSettings, Settings
from service.usage import signal
from service.usage.adapter_training import refresh_maps
from service.usage.learning import popularity_boost, refresh_stats, reliability_penalty
from service.usage.signal import evidence
from tests.policy.policy_world import bearer, first_key, make_key, make_settings

TEST_SERVER = Path(__file__).resolve().parents[1] / "upstream" / "mcp_test_server.py"
PERMISSIONS = """
roles:
  dev:
    allow: ["t__echo", "t__big", "server:files"]
"""
PATH_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
FILE_TOOLS = [
    {"name": "erase_folder", "description": "Erase a folder and everything inside it", "inputSchema": PATH_SCHEMA},
    # No word of DELETE_QUERY in its name or text: one BM25 hit ("files") lifts a tool a level above the others.
    {"name": "list_folder", "description": "List what a folder holds", "inputSchema": PATH_SCHEMA},
    {
        "name": "weather_forecast",
        "description": "The weather forecast for a city",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
]
ECHO_QUERY = "say it again"  # t__echo first, t__big 0.7 behind
DELETE_QUERY = "delete all my files"
UNCAPPED = {
    "shared_calls_per_caller": 1e9,
    "share_invalid_arguments": True,
    "usage_evidence_per_caller": 1e9,
}


@asynccontextmanager
async def scope_world(tmp_path: Path, database_url: str, **learning: Any) -> AsyncIterator[dict[str, Any]]:
    """The test server `t` and a listed server `files`; two callers of role dev, A (the attacker) and B."""
    listed = tmp_path / "files.json"
    listed.write_text(json.dumps({"tools": FILE_TOOLS}))
    servers = {
        "t": {"command": sys.executable, "args": [str(TEST_SERVER), "stdio"]},
        "files": {"command": sys.executable, "args": [str(TEST_SERVER), "listed", str(listed)]},
    }
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": servers}))
    settings: Settings = make_settings(tmp_path, PERMISSIONS, rate_limit_burst=1000)
    settings.db.url = database_url
    settings.execution.servers_file = tmp_path / "servers.json"
    settings.execution.startup_wait_seconds = 60
    for name, value in learning.items():
        setattr(settings.learning, name, value)
    app = create_app(settings, embedder=SentenceTransformerEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            admin = await first_key(app, "root", ["admin"])
            yield {
                "http": http,
                "resources": app.state.resources,
                "a": await make_key(http, "attacker", ["dev"], admin),
                "b": await make_key(http, "victim", ["dev"], admin),
            }


async def search(http: httpx.AsyncClient, key: str, query: str) -> dict[str, Any]:
    response = await http.post("/search", json={"query": query, "k": 5, "explain": True}, headers=bearer(key))
    assert response.status_code == 200, response.text
    body = response.json()
    return {
        "id": body["search_id"],
        "ranking": [r["name"] for r in body["results"]],
        "by_name": {
            r["name"]: {
                "score": r["score"],
                "boosts": r["explain"]["boosts"],
                "usage": r["explain"]["signals"].get("usage"),
                "adapter": r["explain"]["signals"].get("adapter"),
            }
            for r in body["results"]
        },
    }


async def call(
    http: httpx.AsyncClient, key: str, name: str, arguments: dict[str, Any], search_id: str | None = None
) -> str:
    body = {"name": name, "arguments": arguments, "search_id": search_id}
    response = await http.post("/execute", json=body, headers=bearer(key))
    assert response.status_code in (200, 422), response.text
    return str(response.json().get("status", response.json().get("type")))


async def wrong_arguments(w: dict[str, Any], times: int) -> dict[str, Any]:
    """Attack (a): A calls B's first result with arguments that do not fit; B's and A's views after."""
    http = w["http"]
    for _ in range(times):
        await call(http, w["a"], "t__echo", {"times": "many"})  # `text` missing, `times` not an integer
    await refresh_stats(w["resources"])
    return {"b": await search(http, w["b"], ECHO_QUERY), "a": await search(http, w["a"], ECHO_QUERY)}


async def flood(w: dict[str, Any], times: int) -> dict[str, Any]:
    """Attack (b): A's searches for DELETE_QUERY each lead to a successful call of the weather tool."""
    http = w["http"]
    for _ in range(times):
        found = await search(http, w["a"], DELETE_QUERY)
        assert await call(http, w["a"], "files__weather_forecast", {"city": "Oslo"}, found["id"]) == "ok"
    await refresh_stats(w["resources"])
    return {"b": await search(http, w["b"], DELETE_QUERY), "a": await search(http, w["a"], DELETE_QUERY)}


B_USES = [  # B's own past requests, one for each tool of the scope
    ("remove every file in my downloads folder", "files__erase_folder", {"path": "~/Downloads"}),
    ("show me what is in my documents folder", "files__list_folder", {"path": "~/Documents"}),
    ("will it rain in Paris tomorrow", "files__weather_forecast", {"city": "Paris"}),
    ("repeat this sentence back to me", "t__echo", {"text": "hello"}),
    ("give me a long text of numbered lines", "t__big", {"lines": 3}),
]


async def b_uses_every_tool(w: dict[str, Any], caller: str = "b", uses: list[tuple[str, str, Any]] = B_USES) -> None:
    """B has asked for each tool once, in other words: every tool has history in the scope, so no tool is held back
    by the newcomer rule (service.search.ranking.behind_newcomers) and only the caps stand against a flood."""
    for query, name, arguments in uses:
        found = await search(w["http"], w[caller], query)
        assert name in found["ranking"], found["ranking"]
        assert await call(w["http"], w[caller], name, arguments, found["id"]) == "ok"
    await refresh_stats(w["resources"])


@pytest.mark.upstream
@pytest.mark.model
async def test_one_caller_cannot_sink_or_raise_a_tool_for_another_of_its_scope(
    tmp_path: Path, database_url: str
) -> None:
    learning = LearningSettings()
    async with scope_world(tmp_path, database_url) as w:
        before = await search(w["http"], w["b"], ECHO_QUERY)
        assert before["ranking"][0] == "t__echo"
        after = await wrong_arguments(w, 40)
        # For B, A's 40 calls count as 2 (learning.shared_calls_per_caller): the same ranking, the tool a bounded
        # 0.15 lower, nothing else moved.
        cap = learning.shared_calls_per_caller
        sunk = reliability_penalty(0, cap, learning) + popularity_boost(cap, learning)
        assert -0.16 < sunk < -0.1
        assert after["b"]["ranking"] == before["ranking"]
        moved = {n: after["b"]["by_name"][n]["score"] - before["by_name"][n]["score"] for n in before["by_name"]}
        assert moved == {n: pytest.approx(sunk if n == "t__echo" else 0.0, abs=2e-3) for n in moved}
        # A's own view learned: its failures sink the tool below the next one for it.
        assert after["a"]["by_name"]["t__echo"]["boosts"]["reliability"] < -0.5
        assert after["a"]["ranking"][0] == "t__big"

        await b_uses_every_tool(w)
        before = await search(w["http"], w["b"], DELETE_QUERY)
        a_before = await search(w["http"], w["a"], DELETE_QUERY)
        assert before["ranking"][0] == a_before["ranking"][0] == "files__erase_folder"
        after = await flood(w, 32)
        # A's own view learned in full: its 32 searches put the weather tool first for it.
        assert after["a"]["ranking"][0] == "files__weather_forecast", after
        assert after["a"]["by_name"]["files__weather_forecast"]["usage"] > 2.5
        # For B, A's 32 searches are worth its latest 2 with 0.1 of evidence: a bounded lift, the same first result.
        bound = learning.usage_weight * evidence(learning.usage_evidence_per_caller, learning.usage_half_evidence)
        assert bound < 0.15
        lifted = after["b"]["by_name"]["files__weather_forecast"]["usage"]
        assert 0.0 < lifted <= bound
        assert after["b"]["ranking"][0] == "files__erase_folder"  # tools closer than the bound may swap below it
        moved = {n: after["b"]["by_name"][n]["score"] - before["by_name"][n]["score"] for n in before["by_name"]}
        assert all(abs(delta) <= bound + 0.01 for delta in moved.values()), moved  # popularity: +0.006 at most


@pytest.mark.upstream
@pytest.mark.model
async def test_without_the_caps_both_attacks_move_another_callers_ranking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the caps close: with them switched off (the learning of before), both attacks work."""
    monkeypatch.setattr(signal, "QUERIES_PER_OTHER_CALLER", 32)
    async with scope_world(tmp_path, f"sqlite:///{tmp_path / 'uncapped.db'}", **UNCAPPED) as w:
        before = await search(w["http"], w["b"], ECHO_QUERY)
        after = await wrong_arguments(w, 40)
        assert after["b"]["by_name"]["t__echo"]["boosts"]["reliability"] < -0.5
        assert before["ranking"][0] == "t__echo" != after["b"]["ranking"][0]

        await b_uses_every_tool(w)
        assert (await search(w["http"], w["b"], DELETE_QUERY))["ranking"][0] == "files__erase_folder"
        after = await flood(w, 32)
        assert after["b"]["ranking"][0] == "files__weather_forecast"


@pytest.mark.upstream
@pytest.mark.model
async def test_invalid_arguments_can_count_for_their_caller_only(tmp_path: Path) -> None:
    """With learning.share_invalid_arguments off, A's 40 calls that do not fit leave B's view exactly as it was."""
    async with scope_world(tmp_path, f"sqlite:///{tmp_path / 'own.db'}", share_invalid_arguments=False) as w:
        before = await search(w["http"], w["b"], ECHO_QUERY)
        after = await wrong_arguments(w, 40)
        assert after["b"] == {**before, "id": after["b"]["id"]}
        assert after["a"]["ranking"][0] == "t__big"  # A's own view learned


DELETE_PHRASINGS = [  # 40 distinct requests to delete files, each of which A follows with a call of a wrong tool
    f"{verb} {what}"
    for verb in ("delete", "erase", "remove", "wipe", "clear")
    for what in (
        "all my files",
        "everything in my folder",
        "my documents",
        "the files in my home directory",
        "every file here",
        "my old backups",
        "the downloads folder",
        "all of my photos",
    )
]


async def adapter_flood(w: dict[str, Any]) -> dict[str, Any]:
    """A's 40 distinct requests to delete files each lead to a successful call of the weather tool or of the one that
    lists files (2 tools: a scope keeps learning.usage_max_queries, 32, a tool); the maps are trained (on the worker
    thread, waited for); B's and A's views of DELETE_QUERY after."""
    http, resources = w["http"], w["resources"]
    for i, text in enumerate(DELETE_PHRASINGS):
        found = await search(http, w["a"], text)
        name, arguments = (
            ("files__weather_forecast", {"city": "Oslo"}) if i % 2 else ("files__list_folder", {"path": "~"})
        )
        assert await call(http, w["a"], name, arguments, found["id"]) == "ok"
    await refresh_stats(resources)
    await refresh_maps(resources, resources.usage, wait=True)
    return {"b": await search(http, w["b"], DELETE_QUERY), "a": await search(http, w["a"], DELETE_QUERY)}


@pytest.mark.upstream
@pytest.mark.model
async def test_one_caller_cannot_train_the_query_adapter_of_another(tmp_path: Path, database_url: str) -> None:
    """With the query adapter on: A's flood of 40 distinct requests trains a map of its own (A's view learns), and
    none of B's (a map trains on its caller's own requests only): B's view gets no adapter value at all, only the
    usage signal's capped lift."""
    learning = LearningSettings()
    async with scope_world(tmp_path, database_url) as w:
        await b_uses_every_tool(w)
        before = await search(w["http"], w["b"], DELETE_QUERY)
        assert before["ranking"][0] == "files__erase_folder"
        after = await adapter_flood(w)
        maps = w["resources"].usage.maps["dev"]
        assert set(maps.own) == {"attacker"}
        assert after["a"]["by_name"]["files__weather_forecast"]["adapter"] > 0.1, after["a"]
        assert after["a"]["ranking"][0] in ("files__weather_forecast", "files__list_folder")  # A's view learned
        assert after["b"]["ranking"][0] == "files__erase_folder"
        assert all(entry["adapter"] is None for entry in after["b"]["by_name"].values())
        lifted = after["b"]["by_name"]["files__weather_forecast"]["usage"]
        bound = learning.usage_weight * evidence(learning.usage_evidence_per_caller, learning.usage_half_evidence)
        assert 0.0 < lifted <= bound  # the usage signal's own cap, as in the flood of one request
