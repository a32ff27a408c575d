"""POST /search: exact names, filters, k bounds, explain and the search log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from indexer.embedding import HashingEmbedder
from service.db.models import Search
from service.main import create_app
from tests.conftest import make_settings

TOOLS = [
    {"server": "weather", "name": "get_forecast", "description": "Weather forecast for a city", "tags": ["outdoor"]},
    {"server": "travel", "name": "book_flight", "description": "Book a flight between two airports"},
    {"server": "mail", "name": "send_email", "description": "Send an email message to a recipient"},
    {"server": "mail2", "name": "send_email", "description": "Send mail through another provider"},
    {"server": "chat", "name": "post_message", "description": "Post a message in a chat channel"},
]


async def _seed(client: httpx.AsyncClient) -> None:
    assert (await client.post("/tools", json={"tools": TOOLS})).status_code == 200


async def test_query_equal_to_a_name_returns_it_first_in_any_spelling(client: httpx.AsyncClient) -> None:
    await _seed(client)
    for query in ("book_flight", "Book Flight", "BOOK-FLIGHT", "travel__book_flight"):
        results = (await client.post("/search", json={"query": query})).json()["results"]
        assert results[0]["name"] == "travel__book_flight", query


async def test_same_name_on_two_servers_both_come_first(client: httpx.AsyncClient) -> None:
    await _seed(client)
    results = (await client.post("/search", json={"query": "send email", "k": 3})).json()["results"]
    assert {r["name"] for r in results[:2]} == {"mail__send_email", "mail2__send_email"}


async def test_names_of_one_server_that_differ_only_in_separators_are_two_tools_each_first_as_spelled(
    client: httpx.AsyncClient,
) -> None:
    """`math.gcd` and `math_gcd` (both in public catalogs) were one qualified name: the second was refused."""
    tools = [
        {"server": "py", "name": "math.gcd", "description": "Greatest common divisor of two integers"},
        {"server": "py", "name": "math_gcd", "description": "Greatest common divisor of a list of integers"},
        {"server": "py", "name": "获取天气", "description": "Weather of a city"},
        {"server": "py", "name": "查询航班", "description": "Flights between two cities"},
    ]
    report = (await client.post("/tools", json={"tools": tools})).json()
    assert (report["created"], report["errors"]) == (4, [])
    for query in ("math.gcd", "math_gcd", "获取天气", "查询航班"):
        first = (await client.post("/search", json={"query": query, "k": 2})).json()["results"][0]
        assert first["tool"] == query, (query, first["name"])
    names = {t["name"] for t in (await client.get("/tools", params={"server": "py"})).json()["tools"]}
    assert {n for n in names if n.startswith("py__math_gcd")} == {"py__math_gcd", "py__math_gcd-8ce3b558"}


async def test_filters_apply_inside_the_query(client: httpx.AsyncClient) -> None:
    await _seed(client)
    body = (await client.post("/search", json={"query": "send email", "k": 1, "servers": ["chat"]})).json()
    assert [r["name"] for r in body["results"]] == ["chat__post_message"]
    body = (await client.post("/search", json={"query": "book flight", "tags": ["outdoor"]})).json()
    assert [r["name"] for r in body["results"]] == ["weather__get_forecast"]


async def test_results_are_ready_to_call_and_explain_shows_signals(client: httpx.AsyncClient) -> None:
    await _seed(client)
    body = (await client.post("/search", json={"query": "weather forecast", "k": 2, "explain": True})).json()
    top = body["results"][0]
    assert top["name"] == "weather__get_forecast" and top["tool"] == "get_forecast" and top["server"] == "weather"
    assert set(top["explain"]["signals"]) == {"name", "description", "params", "lexical"}
    assert (
        top["score"] == sum(top["explain"]["signals"].values())
        or abs(top["score"] - sum(top["explain"]["signals"].values())) < 1e-3
    )
    assert "explain" not in (await client.post("/search", json={"query": "weather"})).json()["results"][0]


async def test_k_defaults_to_five_and_is_bounded(client: httpx.AsyncClient) -> None:
    await _seed(client)
    await client.post("/tools", json={"tools": [{"server": "x", "name": f"tool_{i}"} for i in range(10)]})
    assert len((await client.post("/search", json={"query": "tool"})).json()["results"]) == 5
    assert len((await client.post("/search", json={"query": "tool", "k": 50})).json()["results"]) == 15
    assert (await client.post("/search", json={"query": "tool", "k": 0})).status_code == 422
    blank = await client.post("/search", json={"query": "   "})
    assert blank.status_code == 422
    assert blank.json()["errors"] == [
        {"pointer": "/body/query", "reason": "must not be blank (only whitespace)"}
    ]


async def test_a_query_of_only_invisible_characters_emoji_or_markdown_is_a_422(client: httpx.AsyncClient) -> None:
    await _seed(client)
    for query in ("\u200b\ufeff", "🙏 👍🏽", "```\n```"):
        response = await client.post("/search", json={"query": query})
        assert response.status_code == 422, query
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["errors"] == [
            {"pointer": "/body/query", "reason": "must hold words, not only invisible characters, symbols or markdown"}
        ]


async def test_a_name_in_backticks_quotes_or_full_width_letters_is_found_first(client: httpx.AsyncClient) -> None:
    await _seed(client)
    for query in ("`book_flight`", "**Book-Flight**", "\u201cbookFlight\u201d", "ｂｏｏｋ＿ｆｌｉｇｈｔ"):
        results = (await client.post("/search", json={"query": query})).json()["results"]
        assert results[0]["name"] == "travel__book_flight", query


async def test_a_field_the_body_does_not_define_is_a_422_naming_it(client: httpx.AsyncClient) -> None:
    """Not ignored: `top_k` would silently get the default k, a misspelt `arguments` a call with none."""
    await _seed(client)
    search = await client.post("/search", json={"query": "tool", "top_k": 3})
    call = await client.post("/execute", json={"name": "x__tool_1", "args": {"a": 1}})
    for response, pointer in ((search, "/body/top_k"), (call, "/body/args")):
        assert response.status_code == 422
        assert response.headers["content-type"].startswith("application/problem+json")
        [error] = response.json()["errors"]
        assert error["pointer"] == pointer
        assert error["reason"].startswith("Extra inputs are not permitted (its fields: ")
    assert search.json()["errors"][0]["reason"].endswith(" (its fields: query, k, servers, tags, explain; did you mean k?)")
    assert call.json()["errors"][0]["reason"].endswith("; did you mean arguments?)")


async def test_long_non_english_queries_work(client: httpx.AsyncClient) -> None:
    await _seed(client)
    long_query = " ".join(["please send an email to my team about the quarterly results"] * 60)
    assert (await client.post("/search", json={"query": long_query})).json()["results"][0]["tool"] == "send_email"
    body = (await client.post("/search", json={"query": "東京の天気予報を教えて"})).json()
    assert len(body["results"]) == 5


async def test_every_search_is_logged(client: httpx.AsyncClient) -> None:
    await _seed(client)
    body = (await client.post("/search", json={"query": "post a chat message", "k": 2})).json()
    transport = client._transport  # the ASGI app behind the client
    resources = transport.app.state.resources  # type: ignore[attr-defined]
    for _ in range(50):
        async with resources.session() as session:
            row = await session.get(Search, body["search_id"])
        if row is not None:
            break
        await asyncio.sleep(0.02)
    assert row is not None and row.caller == "local" and row.k == 2 and row.query == "post a chat message"
    assert [r["name"] for r in row.results] == [r["name"] for r in body["results"]]
    async with resources.session() as session:
        assert len((await session.scalars(select(Search))).all()) == 1


async def test_a_qdrant_index_may_fuse_the_signals_itself(tmp_path: Path) -> None:
    """index.server_fusion: one prefetch-and-fuse query per text; the fused score is the one signal."""
    settings = make_settings(tmp_path, index={"backend": "qdrant", "url": ":memory:", "server_fusion": True})
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            await _seed(client)
            body = (await client.post("/search", json={"query": "weather forecast", "k": 2, "explain": True})).json()
            filtered = (await client.post("/search", json={"query": "send email", "servers": ["chat"]})).json()
    top = body["results"][0]
    assert top["name"] == "weather__get_forecast"
    assert set(top["explain"]["signals"]) == {"fused"} and top["explain"]["similarity"]["fused"] > 0
    assert {r["server"] for r in filtered["results"]} == {"chat"}


async def test_the_embedded_engine_and_a_qdrant_collection_rank_alike_with_centred_fields(tmp_path: Path) -> None:
    """Centring (search.centre_fields) on both backends: the edge shard's running field sums and the qdrant
    adapter's sampled mean with its d·m query give the same ranking and scores."""
    answers = []
    for backend in ("edge", "qdrant"):
        index = {"backend": backend, "url": ":memory:" if backend == "qdrant" else None}
        app = create_app(make_settings(tmp_path / backend, index=index), embedder=HashingEmbedder())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                await _seed(client)
                body = {"query": "send a message about the weather", "k": 5, "explain": True}
                answers.append((await client.post("/search", json=body)).json()["results"])
    edge, qdrant = answers
    assert [r["name"] for r in edge] == [r["name"] for r in qdrant] and len(edge) == 5
    for a, b in zip(edge, qdrant, strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-4)
        assert a["explain"]["similarity"] == pytest.approx(b["explain"]["similarity"], abs=1e-4)
