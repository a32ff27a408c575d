"""Concurrent searches share one index job and one scan of the pool matrix (service/search/index_steps.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from indexer.embedding import HashingEmbedder
from indexer.index.base import IndexBackendError, SearchFilter
from service.resources import Resources
from tests.conftest import demo_resources

QUERIES = [
    "what time is it in Tokyo?",
    "commit my staged changes with a message",
    "read a file. Then post its summary to the #general Slack channel. Finally open an issue about it",
    "list the branches",
    "remember that Alice works at Acme",
    "fetch https://example.com",
]


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[Resources]:
    async with demo_resources(tmp_path, HashingEmbedder()) as resources:
        yield resources


def _ranked(outcome: object) -> list[tuple[str, float]]:
    return [(r.name, r.score) for r in outcome.results]  # type: ignore[attr-defined]


async def test_searches_that_wake_together_run_as_one_job_and_rank_as_alone(demo: Resources) -> None:
    retriever = demo.retriever
    assert retriever is not None
    where = SearchFilter(servers=("git", "time", "memory", "slack", "filesystem", "fetch", "github"))
    alone = [_ranked(await retriever.search(q, 10, where)) for q in QUERIES]  # also fills the query cache
    before = retriever.index_steps.jobs_run
    together = await asyncio.gather(*(retriever.search(q, 10, where) for q in QUERIES))
    assert retriever.index_steps.jobs_run == before + 1  # every query was cached: all six woke in one turn
    for ranked, outcome in zip(alone, together, strict=True):
        assert [name for name, _ in _ranked(outcome)] == [name for name, _ in ranked]
        assert [score for _, score in _ranked(outcome)] == pytest.approx([score for _, score in ranked], abs=1e-5)


async def test_an_index_failure_fails_each_search_of_the_job_and_the_next_job_runs(
    demo: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    retriever, index = demo.retriever, demo.index
    assert retriever is not None and index is not None
    for q in QUERIES[:3]:
        await retriever.search(q, 5, SearchFilter())
    scan_many = index.scan_many  # type: ignore[attr-defined]
    calls = 0

    def failing_once(*args: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise IndexBackendError("edge index: search failed: disk gone")
        return scan_many(*args)

    monkeypatch.setattr(index, "scan_many", failing_once)
    failed = await asyncio.gather(
        *(retriever.search(q, 5, SearchFilter()) for q in QUERIES[:3]), return_exceptions=True
    )
    assert all(isinstance(f, IndexBackendError) and "disk gone" in str(f) for f in failed), failed
    again = await asyncio.gather(*(retriever.search(q, 5, SearchFilter()) for q in QUERIES[:3]))
    assert all(outcome.results for outcome in again) and calls == 2
