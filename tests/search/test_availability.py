"""A search result says whether its tool can be called now (service/search/availability.py): real upstream servers
(the in-repo test server running, one whose command does not exist), a catalog tool with no server, through
POST /search, the MCP front end's search_tools and code mode's search_tools."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.embedding import HashingEmbedder
from service.cli import main
from service.db.models import Server
from service.main import create_app
from service.mcp import render
from service.search.availability import SearchHit, rank_by_availability
from service.search.retrieval import RankedTool
from tests.conftest import make_settings
from tests.mcp.conftest import client_of, frontend_of, register, serving, text_of
from tests.policy import policy_world
from tests.processes import free_port
from tests.search.test_cli_search import CATALOG, direct_cli
from tests.upstream.upstream_support import local_server, node_server, running

# Tools registered for a server with no connection, and for the server whose command does not exist.
PAPER = [{"server": "paper", "name": "print_page", "description": "Echo a page of text to the printer"}]
BROKEN = [{"server": "broken", "name": "echo_back", "description": "Echo the text back"}]


def ranked(*names_and_scores: tuple[str, float]) -> list[RankedTool]:
    return [
        RankedTool(name, score, {"server": name.split("__")[0]}, {"signals": {}}) for name, score in names_and_scores
    ]


def test_a_penalty_moves_an_unavailable_tool_below_near_available_ones_and_keeps_it() -> None:
    results = ranked(("down__a", 3.0), ("up__b", 2.9), ("up__c", 1.0), ("down__d", 0.5))
    states = {"up": None, "down": "backoff"}

    def unavailable(server: str, tool: str) -> str | None:
        return states[server]

    unchanged = rank_by_availability(results, unavailable, 0.0)
    assert [(h.name, h.score, h.available, h.unavailable_reason) for h in unchanged] == [
        ("down__a", 3.0, False, "backoff"),
        ("up__b", 2.9, True, None),
        ("up__c", 1.0, True, None),
        ("down__d", 0.5, False, "backoff"),
    ]
    assert all("unavailable_penalty" not in (h.explain or {}) for h in unchanged)
    demoted = rank_by_availability(results, unavailable, 0.5)
    assert [(h.name, h.score) for h in demoted] == [("up__b", 2.9), ("down__a", 2.5), ("up__c", 1.0), ("down__d", 0.0)]
    assert [h.explain for h in demoted if not h.available] == [{"signals": {}, "unavailable_penalty": 0.5}] * 2
    assert [h.explain for h in demoted if h.available] == [{"signals": {}}] * 2


def test_without_a_gateway_nothing_is_said_of_availability() -> None:
    hits = rank_by_availability(ranked(("a__x", 1.0)), None, 0.5)
    assert hits == [SearchHit("a__x", 1.0, {"server": "a"}, {"signals": {}}, None, None)]


async def search(client: httpx.AsyncClient, query: str, server: str, **body: Any) -> list[dict[str, Any]]:
    response = await client.post("/search", json={"query": query, "servers": [server], "k": 50, **body})
    assert response.status_code == 200, response.text
    return list(response.json()["results"])


@pytest.mark.upstream
async def test_each_result_says_whether_its_server_can_take_the_call(tmp_path: Path) -> None:
    servers = {"good": local_server("stdio"), "broken": {"command": str(tmp_path / "no-such-server")}}
    # A long first backoff: the broken server stays in backoff for the whole test; a call of its tool waits for it
    # execution.timeout_seconds before its 502.
    async with running(tmp_path, servers, reconnect_initial_seconds=600, timeout_seconds=2) as (app, client):
        registered = await client.post("/tools", json={"tools": PAPER + BROKEN})
        assert registered.status_code == 200 and registered.json()["errors"] == []
        good = await search(client, "echo the text back", "good")
        broken = await search(client, "echo the text back", "broken")
        paper = await search(client, "echo the text back", "paper", explain=True)
        states = {s["id"]: s["state"] for s in (await client.get("/servers")).json()["servers"]}
        called = await client.post("/execute", json={"name": "broken__echo_back", "arguments": {"text": "hi"}})

        # The MCP front end's search_tools over the same service.
        settings = app.state.resources.settings
        async with frontend_of(settings, httpx.ASGITransport(app=app)) as frontend, client_of(frontend) as (mcp, _):
            shown_good = json.loads(text_of(await mcp.call_tool("search_tools", {"query": "echo", "server": "good"})))
            shown_paper = json.loads(
                text_of(await mcp.call_tool("search_tools", {"query": "print a page", "server": "paper"}))
            )
        # Code mode's search_tools.
        script = (
            "return (await search_tools('echo the text', 20)).map(t => [t.name, t.available, t.unavailable_reason])"
        )
        run = await client.post("/run", json={"script": script})

    assert states == {"good": "ready", "broken": "backoff", "paper": "catalog"}
    assert called.status_code == 502  # what `available: false` spares the agent
    assert good and {(r["server"], r["available"]) for r in good} == {("good", True)}
    assert all("unavailable_reason" not in r for r in good)
    assert [(r["name"], r["available"], r["unavailable_reason"]) for r in broken] == [
        ("broken__echo_back", False, "backoff")
    ]
    assert [(r["name"], r["available"], r["unavailable_reason"]) for r in paper] == [
        ("paper__print_page", False, "catalog")
    ]
    assert "unavailable_penalty" not in paper[0]["explain"]  # off by default (bench/unavailable_penalty.py)

    assert shown_good["tools"] and all("available" not in t for t in shown_good["tools"])
    assert render.UNAVAILABLE_HINT not in shown_good["hint"]
    assert [(t["name"], t["available"], t["unavailable_reason"]) for t in shown_paper["tools"]] == [
        ("paper__print_page", False, "catalog")
    ]
    assert shown_paper["hint"].endswith(render.UNAVAILABLE_HINT)

    assert run.status_code == 200, run.text
    found = {name: (available, state) for name, available, state in run.json()["result"]}
    assert found["good__echo"] == (True, None)
    assert found["broken__echo_back"] == (False, "backoff")


async def test_toolscout_search_marks_the_results_that_cannot_be_called_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rest = create_app(make_settings(tmp_path / "service"), embedder=HashingEmbedder())
    async with serving(rest, free_port()) as api_url:
        await register(rest, PAPER)
        monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path / "cli"))
        monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", api_url)
        assert await asyncio.to_thread(main, ["search", "print a page"]) == 0
        printed = capsys.readouterr().out
    first = printed.splitlines()[1]  # under "1 tool in ... ms"
    assert first.startswith(" 1. paper__print_page  (") and first.endswith(")  [unavailable: catalog]"), printed


def test_the_cli_searching_the_data_folder_itself_says_nothing_of_availability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    direct_cli(tmp_path, monkeypatch)
    assert main(["index", str(CATALOG)]) == 0
    capsys.readouterr()
    assert main(["search", "send an email", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert results and all("available" not in r and "unavailable_reason" not in r for r in results)


@pytest.mark.upstream
@pytest.mark.node
async def test_a_tool_its_server_runs_only_as_a_task_is_unavailable(tmp_path: Path, node_modules: Path) -> None:
    servers = {"everything": node_server(node_modules, "everything", "stdio")}
    async with running(tmp_path, servers, timeout_seconds=10) as (_, client):
        found = await search(client, "simulate a research query", "everything")
        called = await client.post(
            "/execute", json={"name": "everything__simulate-research-query", "arguments": {"topic": "tea"}}
        )
    reasons = {r["name"]: (r["available"], r.get("unavailable_reason")) for r in found}
    assert reasons.pop("everything__simulate-research-query") == (False, "task_required")
    assert reasons and set(reasons.values()) == {(True, None)}  # its server is ready: the others can be called
    # What the flag spares the agent:
    assert called.status_code == 200 and called.json()["is_error"] is True, called.text
    assert "requires task augmentation" in called.json()["content"][0]["text"]


async def test_a_caller_learns_no_more_than_get_servers_shows_it(tmp_path: Path) -> None:
    async with policy_world.running(policy_world.make_settings(tmp_path)) as (app, http):
        assert (await http.post("/tools", json={"tools": policy_world.TOOLS})).status_code == 200
        dev = policy_world.bearer(await policy_world.first_key(app, "dev-1", ["dev"]))
        answer = await http.post("/search", json={"query": "read the vault secret salary", "k": 50}, headers=dev)
        shown = (await http.get("/servers", headers=dev)).json()["servers"]
    results = answer.json()["results"]
    assert {r["name"] for r in results} == policy_world.VISIBLE_TO_DEV
    states = {s["id"]: s["state"] for s in shown}
    assert states == {"public": "catalog", "util": "catalog"}
    assert {(r["server"], r["available"], r["unavailable_reason"]) for r in results} == {
        (server, False, state) for server, state in states.items()
    }
    assert "vault" not in json.dumps(results) and "payroll" not in json.dumps(results)


@pytest.mark.upstream
async def test_a_stored_server_that_does_not_run_here_is_stopped_in_its_results_as_in_get_servers(
    tmp_path: Path,
) -> None:
    api_stdio: dict[str, Any] = {"allow_api_stdio": True, "api_stdio_commands": [sys.executable]}
    async with running(tmp_path, **api_stdio) as (app, client):
        added = await client.post("/servers", json={"id": "later", **local_server()})
        assert added.status_code == 201, added.text
        async with app.state.resources.session() as session:
            row = await session.get(Server, "later")
            assert row is not None
            row.config = {**row.config, "timeout_seconds": "soon"}  # a stored configuration this version refuses
            await session.commit()
    async with running(tmp_path, **api_stdio) as (app, client):  # the restart does not start it
        shown = (await client.get("/servers/later")).json()
        found = await search(client, "echo the text back", "later")
    assert (shown["state"], shown["health"]) == ("stopped", None) and shown["tools"] > 0
    assert found and {(r["available"], r["unavailable_reason"]) for r in found} == {(False, "stopped")}
