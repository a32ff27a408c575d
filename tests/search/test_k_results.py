"""A search returns min(k, the tools the caller may see) distinct tools, all visible to it, best first with the exact
name ahead, for every k up to search.max_k: with the real model over ~840 real tools (the bundled MCP catalogs and
the retrieval slice under three servers), callers whose permissions hide most of them, and server filters."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.embedding import SentenceTransformerEmbedder
from service.catalog.files import demo_catalog
from service.catalog.service import register_tools
from service.main import create_app
from service.policy import keys
from service.settings import Settings
from tests.conftest import FIXTURES
from tests.mcp.conftest import client_of, frontend_of, text_of

pytestmark = pytest.mark.model
MAX_K = 300
KS = (1, 5, 10, 50, 100, MAX_K)
SUFFIXES = ("", " Works offline.", " Needs an account with the provider.")
# Roles and, for the test's own count of what each may see, their patterns (qualified names; `server:` a server).
ROLES = {
    "all": (["*"], []),
    "narrow": (["server:s1", "git__*", "s2__c*"], ["*search*"]),  # ~300 of ~840 tools
    "few": (["s0__a*", "s0__b*", "time__*"], []),  # fewer tools than k = 100
}
QUERIES = [
    "book a flight to Paris",
    "What is the weather going to be like tomorrow? Also convert 20 dollars to euros.",
    "List the files in my project folder, read the newest one and commit it to git",
    "calculator",  # an exact tool name on three servers
    "git_status",
    "find recipes with chicken",
]


def catalog() -> list[dict[str, Any]]:
    """The bundled catalogs of real MCP servers and the retrieval slice's tools once per server s0, s1, s2 (their
    texts told apart by a sentence: near-duplicates that several signals find together)."""
    lines = (FIXTURES / "retrieval" / "catalog.jsonl").read_text().splitlines()
    slice_tools = [json.loads(line) for line in lines]
    tools = demo_catalog()
    for copy, suffix in enumerate(SUFFIXES):
        tools += [
            {"server": f"s{copy}", "name": t["name"], "description": t["description"] + suffix} for t in slice_tools
        ]
    return tools


def permissions_file(path: Path) -> Path:
    lines = ["roles:"]
    for role, (allow, deny) in ROLES.items():
        lines += [f"  {role}:", f"    allow: {json.dumps(allow)}", f"    deny: {json.dumps(deny)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def permitted(role: str, name: str) -> bool:
    """The role's patterns as the policy reads them: a deny pattern blind to letter case (`WebSearch`)."""
    allow, deny = ROLES[role]

    def matches(pattern: str, blind: bool = False) -> bool:
        if pattern.startswith("server:"):
            return name.split("__", 1)[0] == pattern[7:]
        return fnmatchcase(name.lower(), pattern.lower()) if blind else fnmatchcase(name, pattern)

    return any(map(matches, allow)) and not any(matches(p, blind=True) for p in deny)


@pytest.fixture(scope="module", params=["edge", "qdrant", "qdrant-fusion"])
async def world(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[dict[str, Any]]:
    """The service on each index backend: the embedded engine, qdrant-client (':memory:', the server's code path
    but for HNSW) with the fusion done here, and with its own fusion (`index.server_fusion`)."""
    tmp = Path(tmp_path_factory.mktemp("k_results"))
    settings = Settings(data_dir=tmp, demo_catalog=False)
    if request.param != "edge":
        settings.index.backend, settings.index.url = "qdrant", ":memory:"
        settings.index.server_fusion = request.param == "qdrant-fusion"
    settings.execution.demo_servers = False
    settings.search.max_k = MAX_K
    settings.policy.rate_limit_per_minute = 0
    settings.policy.permissions_file = permissions_file(tmp / "permissions.yaml")
    app = create_app(settings, embedder=SentenceTransformerEmbedder())
    async with app.router.lifespan_context(app):
        resources = app.state.resources
        report = await register_tools(resources, catalog())
        assert not report.errors
        names = resources.retriever.directory.names()
        by_role: dict[str, str] = {}
        async with resources.session() as session:
            for role in ROLES:
                by_role[role] = (await keys.create_key(session, f"agent-{role}", [role])).key
            await session.commit()
        keys.key_resolver(resources).invalidate()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield {
                "http": http,
                "keys": by_role,
                "names": names,
                "resources": resources,
                "transport": transport,
                "backend": request.param,
            }


async def search(world: dict[str, Any], role: str, body: dict[str, Any]) -> httpx.Response:
    return await world["http"].post("/search", json=body, headers={"Authorization": f"Bearer {world['keys'][role]}"})


def check_answer(answer: list[dict[str, Any]], query: str, k: int, visible: set[str]) -> None:
    names = [r["name"] for r in answer]
    assert len(names) == min(k, len(visible)), (query, k, len(names), len(visible))
    assert len(set(names)) == len(names), (query, k)
    assert set(names) <= visible, (query, k, set(names) - visible)
    exact = [r for r in answer if r["tool"].lower() == query.lower()]
    assert answer[: len(exact)] == exact, (query, k)  # every exact name first (all of them when k allows)
    assert len(exact) == min(k, sum(1 for n in visible if n.split("__", 1)[1] == query)), (query, k)
    rest = [r["score"] for r in answer[len(exact) :]]
    assert rest == sorted(rest, reverse=True), (query, k)


@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize("servers", [None, ["s1"], ["s0", "git", "time"]], ids=["any", "s1", "three"])
async def test_every_k_gets_min_of_k_and_the_visible_tools(
    world: dict[str, Any], role: str, servers: list[str] | None
) -> None:
    visible = {n for n in world["names"] if permitted(role, n)}
    if servers is not None:
        visible = {n for n in visible if n.split("__", 1)[0] in servers}
    for query in QUERIES:
        for k in KS:
            response = await search(world, role, {"query": query, "k": k, "servers": servers})
            assert response.status_code == 200, response.text
            check_answer(response.json()["results"], query, k, visible)


async def test_the_catalog_is_large_and_the_callers_see_little_of_it(world: dict[str, Any]) -> None:
    names = world["names"]
    assert len(names) == 85 + 3 * 253
    counts = {role: sum(permitted(role, n) for n in names) for role in ROLES}
    assert counts["all"] == len(names) and 200 < counts["narrow"] < 400 and 10 < counts["few"] < 100, counts


async def test_a_k_past_max_k_is_refused_naming_k_and_the_limit(world: dict[str, Any]) -> None:
    response = await search(world, "all", {"query": "weather", "k": MAX_K + 1})
    assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["errors"] == [{"pointer": "/body/k", "reason": f"must be between 1 and {MAX_K}"}]
    assert (body["limit"], body["max_k"]) == ("search.max_k", MAX_K)
    assert str(MAX_K) in body["detail"] and body["detail"].startswith("k ")


async def test_a_tool_gone_from_the_index_leaves_its_place_to_the_next_one(world: dict[str, Any]) -> None:
    """The name directory still holds a tool the index no longer has (deleted by a replica sharing the index, not
    yet followed here): its exact name was ranked first, then dropped without payload, and the search came back
    one short."""
    resources = world["resources"]
    gone = "s2__calculator"
    resources.index.delete([gone])
    try:
        for k in (1, 5, 50):
            response = await search(world, "all", {"query": "calculator", "k": k})
            names = [r["name"] for r in response.json()["results"]]
            assert len(names) == k and gone not in names, (k, names)
            assert set(names[:2]) == {"s0__calculator", "s1__calculator"} or k == 1
    finally:
        await register_tools(resources, [t for t in catalog() if f"{t['server']}__{t['name']}" == gone])


# The front ends call POST /search, whatever the backend: the embedded index's world is enough.
@pytest.mark.parametrize("world", ["edge"], indirect=True)
@pytest.mark.parametrize("role", ["narrow", "few"])
async def test_the_mcp_search_tools_and_code_mode_get_k_past_fifty(world: dict[str, Any], role: str) -> None:
    """The MCP front end refused k past 50 and code mode clamped it to 50, whatever search.max_k."""
    visible = {n for n in world["names"] if permitted(role, n)}
    settings = world["resources"].settings.model_copy(deep=True)
    settings.frontend.api_key = world["keys"][role]
    async with frontend_of(settings, world["transport"]) as frontend, client_of(frontend) as (client, _):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["search_tools"].input_schema["properties"]["k"]["maximum"] == MAX_K
        for k in (100, MAX_K):
            found = json.loads(text_of(await client.call_tool("search_tools", {"query": "book a flight", "k": k})))
            names = [t["name"] for t in found["tools"]]
            assert len(names) == len(set(names)) == min(k, len(visible)) and set(names) <= visible, (k, len(names))
        refused = await client.call_tool("search_tools", {"query": "book a flight", "k": MAX_K + 1})
        assert refused.is_error and f"1..{MAX_K}" in text_of(refused)
    headers = {"Authorization": f"Bearer {world['keys'][role]}"}
    for k in (100, MAX_K):
        script = f"const found = await search_tools('book a flight', {k}); return found.map(t => t.name);"
        ran = await world["http"].post("/run", json={"script": script}, headers=headers)
        assert ran.status_code == 200, ran.text
        names = ran.json()["result"]
        assert len(names) == len(set(names)) == min(k, len(visible)) and set(names) <= visible, (k, len(names))
    script = f"return await search_tools('book a flight', {MAX_K + 1});"
    ran = (await world["http"].post("/run", json={"script": script}, headers=headers)).json()
    assert ran["result"] is None and f"between 1 and {MAX_K}" in ran["error"]["message"], ran


# Not with Qdrant's own fusion: the index fuses the lists it is given itself, and their length moves its scores.
@pytest.mark.parametrize("world", ["edge", "qdrant"], indirect=True)
@pytest.mark.parametrize("role", ["all", "narrow"])
async def test_a_k_past_fifty_keeps_the_order_of_a_smaller_k(world: dict[str, Any], role: str) -> None:
    """Past search.candidates each signal's candidates grow with k; z-scored over all of them, the head moved (over
    10k tools, k = 100 against k = 10: the first tool differed in 13 of 100 short requests)."""
    for query in QUERIES:
        answers = {}
        for k in (10, 50, 100, MAX_K):
            response = await search(world, role, {"query": query, "k": k})
            answers[k] = [(r["name"], r["score"]) for r in response.json()["results"]]
        assert answers[10] == answers[50][:10] == answers[100][:10], query
        assert answers[50] == answers[100][:50], query
        # Past search.pool_candidates (100) the scan passes more tools to field scoring, and the head may move.
        visible = sum(permitted(role, n) for n in world["names"])
        assert len(answers[MAX_K]) == min(MAX_K, visible), query
