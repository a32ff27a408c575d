"""A misspelt request finds what its spelling meant (service/search/spelling.py): the words of the caller's own
scope only, so that a misspelling near a word of a hidden tool is read as written."""

from __future__ import annotations

import httpx

from indexer.index.base import SearchFilter
from service.search.spelling import spelled_right

TOOLS = [
    {"server": "vcs", "name": "record_changes", "description": "Commit the staged work with a message"},
    {"server": "vcs", "name": "show_history", "description": "Show the log of past work"},
    {"server": "fs", "name": "folder_listing", "description": "List a directory"},
    {"server": "fs", "name": "remove_path", "description": "Delete a path"},
]


async def test_a_misspelt_word_finds_the_tool_its_spelling_meant(client: httpx.AsyncClient) -> None:
    """The deterministic test embedder matches whole words only: before, "comit" and "direcotry" matched no word of
    any tool (no lexical hit, the tools in catalog order)."""
    assert (await client.post("/tools", json={"tools": TOOLS})).json()["created"] == len(TOOLS)
    for query, tool in (("comit everything", "vcs__record_changes"), ("lsit the direcotry", "fs__folder_listing")):
        body = (await client.post("/search", json={"query": query, "k": 2, "explain": True})).json()
        first = body["results"][0]
        assert (first["name"], first["explain"]["similarity"]["lexical"] > 0) == (tool, True), body["results"]


async def test_a_misspelling_is_read_by_the_words_of_the_callers_scope_only(client: httpx.AsyncClient) -> None:
    assert (await client.post("/tools", json={"tools": TOOLS})).json()["created"] == len(TOOLS)
    resources = client._transport.app.state.resources  # type: ignore[attr-defined]
    everyone = SearchFilter()
    assert await spelled_right(resources, "comit my work", everyone) == "commit my work"
    # Only record_changes holds "commit": a caller who may not use it reads the request as written.
    hidden = SearchFilter(denied=frozenset({"vcs__record_changes"}))
    assert await spelled_right(resources, "comit my work", hidden) == "comit my work"
    assert await spelled_right(resources, "comit my work", SearchFilter(allowed=frozenset({"fs__remove_path"}))) == (
        "comit my work"
    )
    # Every word an English word: the same text (no index call).
    assert await spelled_right(resources, "commit my work", everyone) == "commit my work"
