"""Issue 12: a request ranks the same however it is written (case of a name, separators, Unicode forms, invisible
characters, emoji, markdown, a greeting and thanks, the case of its words), on the bundled catalogs of real MCP servers
with the real model. bench/robustness.py measures the rest (a typo, a hard-wrapped line, a polite wrapper) on both dev
sets."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from indexer.documents import split_identifier
from indexer.embedding import SentenceTransformerEmbedder
from indexer.index.base import SearchFilter
from service.resources import Resources
from tests.conftest import FIXTURES, demo_resources

pytestmark = pytest.mark.model
CASES = [json.loads(line) for line in (FIXTURES / "retrieval" / "real_catalog_queries.jsonl").read_text().splitlines()]
FULL_WIDTH = {c: c + 0xFEE0 for c in range(0x21, 0x7F)}

REWRITINGS: dict[str, Callable[[str], str]] = {
    "spaces and newlines": lambda q: " \n  " + "  ".join(q.split(" ")) + " \t\n",
    "full-width letters": lambda q: q.translate(FULL_WIDTH),
    "non-breaking spaces": lambda q: q.replace(" ", "\u00a0"),
    "zero-width characters": lambda q: "\ufeff" + " \u200b".join(q.split(" ")).replace("e", "e\u200d", 1),
    "emoji": lambda q: f"🔍 {q} 🙏🏽",
    "bold": lambda q: f"**{q}**",
    "bullet": lambda q: f"- {q}",
    "code fence": lambda q: f"```\n{q}\n```",
    "curly quotes": lambda q: f"\u201c{q}\u201d",
    "greeting and thanks": lambda q: f"Hi there! {q.rstrip('?')}?? Thank you so much.",
}
# The thanks follow a question: the request is the clean one's with a question mark.
CLEAN = {"greeting and thanks": lambda q: q.rstrip("?") + "?"}


@pytest.fixture(scope="module")
async def demo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Resources]:
    async with demo_resources(Path(tmp_path_factory.mktemp("robust")), SentenceTransformerEmbedder()) as resources:
        yield resources


async def _ranked(demo: Resources, query: str) -> list[tuple[str, float]]:
    assert demo.retriever is not None
    outcome = await demo.retriever.search(query, 10, SearchFilter())
    return [(r.name, r.score) for r in outcome.results]


@pytest.mark.parametrize("rewriting", list(REWRITINGS))
async def test_a_rewritten_request_ranks_as_the_clean_one(demo: Resources, rewriting: str) -> None:
    for case in CASES:
        clean = CLEAN.get(rewriting, lambda q: q)(case["query"])
        written = REWRITINGS[rewriting](case["query"])
        assert await _ranked(demo, written) == await _ranked(demo, clean), (written, clean)


CASINGS: dict[str, Callable[[str], str]] = {"UPPER": str.upper, "lower": str.lower, "Title": str.title}


@pytest.mark.parametrize("casing", list(CASINGS))
async def test_a_request_in_another_case_finds_the_same_first_tool(demo: Resources, casing: str) -> None:
    for case in CASES:
        written = CASINGS[casing](case["query"])
        assert (await _ranked(demo, written))[0][0] == (await _ranked(demo, case["query"]))[0][0], written


async def test_github_in_any_case_meets_the_tools_whose_text_says_github(demo: Resources) -> None:
    """BM25 keeps a camel-case word joined as well as split: a request's `github` or `GITHUB` meets the catalog's
    GitHub (before, only `GitHub`, split as the catalog's is, had a lexical match: `github` had none)."""
    assert demo.retriever is not None
    lexical = {}
    for written in ("github", "GITHUB", "GitHub"):
        outcome = await demo.retriever.search(written, 5, SearchFilter(), explain=True)
        assert all(r.name.startswith("github__") for r in outcome.results), written
        lexical[written] = {r.name: r.explain["similarity"].get("lexical") for r in outcome.results if r.explain}
        assert len(lexical[written]) == 5 and all(lexical[written].values()), (written, lexical[written])
    assert lexical["github"] == lexical["GITHUB"]
    assert lexical["GitHub"]["github__search_repositories"] > lexical["github"]["github__search_repositories"] > 0


NAME_FORMS: dict[str, Callable[[str], str]] = {
    "Title-Kebab": lambda n: "-".join(w.title() for w in split_identifier(n).split()),
    "camelCase": lambda n: "".join(w if i == 0 else w.title() for i, w in enumerate(split_identifier(n).split())),
    "UPPER_SNAKE": lambda n: "_".join(split_identifier(n).split()).upper(),
    "backticks": lambda n: f"`{n}`",
    "bold": lambda n: f"**{n}**",
    "curly quotes": lambda n: f"\u201c{n}\u201d",
    "full-width": lambda n: n.translate(FULL_WIDTH),
}


@pytest.mark.parametrize("form", list(NAME_FORMS))
async def test_a_tool_named_another_way_comes_first(demo: Resources, form: str) -> None:
    """`Get-Current-Time`, `getCurrentTime` or `get_current_time` in backticks finds get_current_time first."""
    assert demo.retriever is not None
    directory = demo.retriever.directory
    for qualified in directory.names():
        listed = directory.listed_name(qualified) or qualified
        named = set(directory.exact(listed, SearchFilter()))
        first = (await _ranked(demo, NAME_FORMS[form](listed)))[0][0]
        assert first in named, (NAME_FORMS[form](listed), first, named)
