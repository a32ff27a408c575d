"""Requests a new user would make against the bundled catalogs of real MCP servers (tests/fixtures/retrieval/
real_catalog_queries.jsonl): the expected tool must be in the top 1 or top 3, as each line says. The `blind-`
requests were written before any of their rankings was seen (a held-out check of the configuration), their line's
top as first measured."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from indexer.embedding import SentenceTransformerEmbedder
from indexer.index.base import SearchFilter
from service.resources import Resources
from tests.conftest import FIXTURES, demo_resources

pytestmark = pytest.mark.model
CASES = [json.loads(line) for line in (FIXTURES / "retrieval" / "real_catalog_queries.jsonl").read_text().splitlines()]
# Still wrong with MiniLM and today's signals (issue 12): the position of the expected tool, measured.
KNOWN_MISSES = {
    "own-14": "git__git_reset is 7th: only BM25 matches 'unstage' to its 'Unstages all staged changes'; the dense "
    "fields put git_add ('added') and the filesystem tools ('file') nearer",
    "own-34": "no memory tool in the top 10: nothing in the memory server's text is near 'Remember that Bob prefers "
    "tea over coffee' for MiniLM, and the lead verb's write verbs only reorder a text's three best",
    "own-35": "no memory tool in the top 10, as own-34",
    # Written blind (stop 44) before any ranking was looked at, kept as measured:
    "blind-13": "git_diff is 5th: the branch tools' names share 'branch' with the request, nothing says 'compare'",
    "blind-19": "no memory tool in the top 10, as own-34 ('note that' names no tool's action)",
    "blind-22": "memory__open_nodes is 4th: 'entities' is in every entity tool's name and 'look up' in none",
    "blind-31": "github__list_commits is 5th: the git server's local tools are nearer to 'commits on the main branch'",
}


@pytest.fixture(scope="module")
async def demo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Resources]:
    async with demo_resources(Path(tmp_path_factory.mktemp("real")), SentenceTransformerEmbedder()) as resources:
        yield resources


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c["qid"], marks=[pytest.mark.xfail(reason=KNOWN_MISSES[c["qid"]], strict=True)])
        if c["qid"] in KNOWN_MISSES
        else pytest.param(c, id=c["qid"])
        for c in CASES
    ],
)
async def test_the_expected_tool_is_in_the_top(demo: Resources, case: dict) -> None:
    assert demo.retriever is not None
    outcome = await demo.retriever.search(case["query"], 10, SearchFilter())
    ranked = [r.name for r in outcome.results]
    assert set(case["relevant"]) & set(ranked[: case["top"]]), (case["query"], ranked[:5])


@pytest.mark.parametrize("k", [1, 3])
async def test_a_small_k_ranks_as_the_head_of_a_large_one(demo: Resources, k: int) -> None:
    """Fusion drops the candidates that cannot reach the top k (service/search/retrieval.py, bonus_bound): the
    head bonuses (lead verb, question's read verbs) go to a text's best three, which it always keeps."""
    assert demo.retriever is not None
    for case in CASES:
        small = await demo.retriever.search(case["query"], k, SearchFilter())
        large = await demo.retriever.search(case["query"], 50, SearchFilter())
        assert [(r.name, r.score) for r in small.results] == [(r.name, r.score) for r in large.results[:k]], case
