"""The query micro-batcher: concurrent embeds share forward passes and get the vectors of single calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from indexer.batching import MicroBatcher
from indexer.embedding import HashingEmbedder, Vector


class SlowRecorder:
    """HashingEmbedder that takes `seconds` per pass and records the size of each pass."""

    dimension = 384
    model_name = "recorder"

    def __init__(self, seconds: float = 0.02) -> None:
        self.inner = HashingEmbedder()
        self.seconds = seconds
        self.passes: list[int] = []

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        self.passes.append(len(texts))
        time.sleep(self.seconds)
        return self.inner.embed(texts)


def test_concurrent_embeds_are_batched_and_equal_single_calls() -> None:
    recorder = SlowRecorder()
    batcher = MicroBatcher(recorder, max_wait=0.002)
    queries = [[f"query number {i}", f"part {i} of it"] if i % 3 == 0 else [f"query number {i}"] for i in range(24)]
    results: dict[int, list[Vector]] = {}
    start = threading.Barrier(len(queries))

    def call(i: int) -> None:
        start.wait()
        results[i] = batcher.embed(queries[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(queries))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    single = HashingEmbedder()
    assert all(results[i] == single.embed(queries[i]) for i in range(len(queries)))
    assert sum(recorder.passes) == sum(len(q) for q in queries) == 32
    # The first pass may hold one request; the 23 others arrive while it runs and share very few passes.
    assert len(recorder.passes) <= 4 and max(recorder.passes) >= 16, recorder.passes
    assert batcher.requests == 24 and batcher.passes == len(recorder.passes)


def test_passes_under_load_take_the_form_for_load_and_a_lone_request_the_default() -> None:
    class TwoForms(SlowRecorder):
        def __init__(self) -> None:
            super().__init__()
            self.forms: list[tuple[str, int]] = []

        def embed(self, texts: Sequence[str]) -> list[Vector]:
            self.forms.append(("default", len(texts)))
            return super().embed(texts)

        def embed_under_load(self, texts: Sequence[str]) -> list[Vector]:
            self.forms.append(("under load", len(texts)))
            return super().embed(texts)

    recorder = TwoForms()
    batcher = MicroBatcher(recorder, max_wait=0.002)
    assert batcher.embed(["alone"]) == HashingEmbedder().embed(["alone"])
    start = threading.Barrier(12)
    threads = [threading.Thread(target=lambda i=i: (start.wait(), batcher.embed([f"query {i}"]))) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    # Each request is one text here: a pass of several texts served several requests, and ran in the form for load.
    assert recorder.forms[0] == ("default", 1) and any(n > 1 for _, n in recorder.forms), recorder.forms
    assert all((form == "under load") == (n > 1) for form, n in recorder.forms), recorder.forms
    assert sum(n for _, n in recorder.forms) == 13


def test_a_lone_request_runs_without_waiting() -> None:
    recorder = SlowRecorder(seconds=0.0)
    batcher = MicroBatcher(recorder, max_wait=0.5)
    started = time.perf_counter()
    assert batcher.embed(["alone"]) == HashingEmbedder().embed(["alone"])
    assert time.perf_counter() - started < 0.25
    batcher.close()


def test_an_embedder_error_reaches_every_caller_of_the_pass() -> None:
    class Broken(SlowRecorder):
        def embed(self, texts: Sequence[str]) -> list[Vector]:
            raise RuntimeError("model failed")

    batcher = MicroBatcher(Broken())
    with pytest.raises(RuntimeError, match="model failed"):
        batcher.embed(["x"])
    assert batcher.embed([]) == []
    batcher.close()


def test_a_lone_request_runs_its_next_step_on_the_worker_and_a_batched_one_leaves_it_to_the_caller() -> None:
    recorder = SlowRecorder()
    batcher = MicroBatcher(recorder, max_wait=0.002)
    ran_on: list[str] = []

    def then(vectors: list[Vector]) -> int:
        ran_on.append(threading.current_thread().name)
        return len(vectors)

    vectors, after = batcher.submit_then(["alone", "and a part"], then).result()
    assert vectors == HashingEmbedder().embed(["alone", "and a part"]) and after == 2
    assert ran_on == ["query-embedder"]

    start = threading.Barrier(12)
    outcomes: dict[int, tuple[list[Vector], object]] = {}

    def call(i: int) -> None:
        start.wait()
        outcomes[i] = batcher.submit_then([f"query {i}"], then).result()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    assert all(outcomes[i][0] == HashingEmbedder().embed([f"query {i}"]) for i in range(12))
    batched = [i for i in range(12) if outcomes[i][1] is None]
    # Most of them shared passes (the first may have run alone): their next step was left to their callers.
    assert len(batched) >= 10 and len(ran_on) == 1 + 12 - len(batched), (batched, ran_on)


def test_the_next_step_failing_is_the_callers_error() -> None:
    batcher = MicroBatcher(SlowRecorder(0.0))

    def then(vectors: list[Vector]) -> None:
        raise LookupError("the index is gone")

    with pytest.raises(LookupError, match="the index is gone"):
        batcher.submit_then(["query"], then).result()
    assert batcher.embed(["still serving"]) == HashingEmbedder().embed(["still serving"])
    batcher.close()


class Gated(SlowRecorder):
    """Records each pass's texts; its first pass waits until released, so the others queue behind it."""

    def __init__(self) -> None:
        super().__init__(seconds=0.0)
        self.release = threading.Event()
        self.texts: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        if not self.texts:
            self.release.wait(10)
        self.texts.append(list(texts))
        return self.inner.embed(texts)


def test_a_pass_serves_callers_in_turn_not_one_callers_queue_first() -> None:
    # One key's eight queued 8-part searches filled the passes ahead of another caller's short query (its p90 went
    # from 33 to 554 ms); a pass now takes one request of each caller in turn.
    gated = Gated()
    batcher = MicroBatcher(gated, max_wait=0.0, max_texts=16)
    batcher.submit(["warm"], owner="attacker")
    time.sleep(0.05)  # the worker is inside its first pass
    floods = [batcher.submit([f"long {i} part {p}" for p in range(8)], owner="attacker") for i in range(6)]
    victim = batcher.submit(["short query"], owner="victim")
    gated.release.set()
    assert victim.result(10) == HashingEmbedder().embed(["short query"])
    for future in floods:
        future.result(10)
    batcher.close()
    passes = gated.texts[1:]
    # The first pass after the gate: the attacker's first search, the victim's (sent after all six), then the
    # attacker's second (a round of each caller, then another, until 16 texts): not behind the attacker's six.
    long = [[f"long {i} part {p}" for p in range(8)] for i in range(6)]
    assert passes[0] == [*long[0], "short query", *long[1]]
    # Then the attacker's others, in the order sent.
    assert passes[1:] == [long[2] + long[3], long[4] + long[5]]


def test_without_owners_requests_are_served_in_arrival_order() -> None:
    gated = Gated()
    batcher = MicroBatcher(gated, max_wait=0.0, max_texts=4)
    batcher.submit(["warm"])
    time.sleep(0.05)
    futures = [batcher.submit([f"q{i}"]) for i in range(10)]
    gated.release.set()
    for future in futures:
        future.result(10)
    batcher.close()
    assert gated.texts[1:] == [["q0", "q1", "q2", "q3"], ["q4", "q5", "q6", "q7"], ["q8", "q9"]]


@pytest.mark.parametrize("then", [None, lambda vectors: len(vectors)])
def test_a_caller_that_gave_up_does_not_stop_the_worker(then: object) -> None:
    """A code-mode run that ended with its `search_tools` in flight cancelled the search's future; setting it raised
    InvalidStateError in the worker thread, which ended, and every later search of the service hung."""
    recorder = SlowRecorder(seconds=0.2)
    batcher = MicroBatcher(recorder, max_wait=0.002)
    try:
        first = batcher.submit(["keep the pass busy"])
        time.sleep(0.05)  # the worker is in its first pass
        texts = ["nobody waits"]
        gone = batcher.submit(texts) if then is None else batcher.submit_then(texts, then)  # type: ignore[arg-type]
        assert gone.cancel()
        first.result(timeout=5)
        time.sleep(0.3)  # the worker has served (and skipped) the cancelled request
        later = batcher.submit(["a later search"])
        assert later.result(timeout=5) == HashingEmbedder().embed(["a later search"])
    finally:
        batcher.close()
