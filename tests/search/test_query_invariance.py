"""Issue 12: a request ranks the same however it is written (case of a name, separators, Unicode forms, invisible
characters, emoji, markdown, a greeting and thanks), on the bundled catalogs of real MCP servers with the real model.
bench/robustness.py measures the rest (a typo, a hard-wrapped line, upper case, a polite wrapper) on both dev sets."""

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
