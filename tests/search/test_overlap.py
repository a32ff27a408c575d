"""A lone search's lexical queries run while its embedding pass does (service/search/overlap.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from indexer.batching import MicroBatcher
from indexer.embedding import HashingEmbedder, Vector
from indexer.index.base import LEXICAL_FIELD, SearchFilter
from indexer.onnx_embedder import OnnxEmbedder
from indexer.pass_hook import before_pass, passing
from service.resources import Resources
from service.search import retrieval
from service.search.overlap import Once
from service.settings import Settings
from tests.conftest import demo_resources

QUERIES = [
    "what time is it in Tokyo?",
    "commit my staged changes with a message",
    "read a file. Then post its summary to the #general Slack channel. Finally open an issue about it",
]


class ModelLike(HashingEmbedder):
    """Says when its "model" starts (after tokenizing, as OnnxEmbedder does), then takes a pass's time."""

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        passing()
        time.sleep(0.02)
        return super().embed(texts)


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[Resources]:
    async with demo_resources(tmp_path, ModelLike()) as resources:
        yield resources


def test_once_computes_for_the_first_thread_and_the_others_wait_for_it() -> None:
    calls: list[str] = []

    def compute() -> int:
        calls.append(threading.current_thread().name)
        time.sleep(0.05)
        return 42

    once = Once(compute)
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(once()), name=f"t{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [42] * 4 and len(calls) == 1


def test_once_keeps_no_failure() -> None:
    attempts = iter([RuntimeError("shard busy"), 7])

    def compute() -> int:
        value = next(attempts)
        if isinstance(value, Exception):
            raise value
        return value

    once = Once(compute)
    once.quietly()  # the failure is left for the next caller, who computes again
    assert once() == 7 and once() == 7


def test_the_batcher_tells_a_lone_request_as_its_pass_begins_and_batched_ones_that_they_are_not_alone() -> None:
    class Slow(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> list[Vector]:
            time.sleep(0.02)
            return super().embed(texts)

    batcher = MicroBatcher(Slow(), max_wait=0.002)
    told: list[bool] = []
    vectors, after = batcher.submit_then(["alone"], len, told.append).result()
    assert told == [True] and after == 1  # an embedder without a hook of its own: told once its pass ended

    start = threading.Barrier(8)
    seen: dict[int, list[bool]] = {i: [] for i in range(8)}

    def call(i: int) -> None:
        start.wait()
        batcher.submit_then([f"query {i}"], len, seen[i].append).result()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    assert all(len(said) == 1 for said in seen.values())
    assert sum(not said[0] for said in seen.values()) >= 6  # most shared a pass: not alone


@pytest.mark.model
def test_the_onnx_embedder_runs_the_hook_once_right_before_its_model_runs() -> None:
    embedder = OnnxEmbedder(models_dir=Settings().models_dir)
    embedder.embed(["load the model"])
    runs: list[str] = []
    session, _ = embedder._load()
    real_run = session.run

    class Recording:
        def run(self, *args: Any) -> Any:
            runs.append("pass")
            return real_run(*args)

    embedder._session = Recording()
    embedder._sessions = {}
    before_pass(lambda: runs.append("hook"))
    try:
        embedder.embed_array(["what time is it in Tokyo?"], under_load=False)
    finally:
        before_pass(None)
    assert runs[:2] == ["hook", "pass"] and runs.count("hook") == 1
    passing()  # nothing left to run
    assert runs.count("hook") == 1


async def test_a_lone_search_asks_its_lexical_queries_once_and_ranks_as_without_them(
    demo: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    retriever, index = demo.retriever, demo.index
    assert retriever is not None and index is not None
    asked: list[tuple[str, int]] = []
    search = index.search

    def counting(queries: Any, where: SearchFilter) -> Any:
        if queries and all(q.signal == LEXICAL_FIELD for q in queries):
            asked.append((threading.current_thread().name, len(queries)))
        return search(queries, where)

    monkeypatch.setattr(index, "search", counting)
    with_early = [await retriever.search(q, 10, SearchFilter()) for q in QUERIES]
    # Once per search, all its texts together, on the event loop while the pass ran.
    assert asked == [("MainThread", 1), ("MainThread", 1), ("MainThread", 4)], asked
    monkeypatch.setattr(retrieval, "early_lexical", lambda *args: None)  # the index step asks them itself
    without = [await retriever.search(q, 10, SearchFilter()) for q in QUERIES]
    for a, b in zip(with_early, without, strict=True):
        assert [(r.name, r.score) for r in a.results] == [(r.name, r.score) for r in b.results]

