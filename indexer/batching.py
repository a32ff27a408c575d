"""Micro-batching of query embeddings: concurrent requests share one forward pass on one worker thread."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from indexer.embedding import Embedder, Vector

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    texts: list[str]
    future: Future[Any] = field(default_factory=Future)
    then: Callable[[list[Vector]], Any] | None = None  # submit_then: (vectors, then(vectors) or None)
    owner: str | None = None  # who asked: a pass takes the callers' requests in turn


class MicroBatcher:
    """Queues query embeds; one worker thread embeds what is queued together, waiting at most `max_wait` for more.

    Alone, a request runs at once (no added latency). When the previous pass served several requests, the
    worker waits up to `max_wait` seconds for more to arrive before the next pass: under load that turns many
    small passes into a few larger ones. The worker thread is also the query path's limiter: query embeds never
    queue behind indexing, which runs on other threads.

    A pass that serves several requests (under load) runs the embedder's form for that when it has one
    (`embed_under_load`: one intra-op thread fewer than the cores, leaving one to the event loop): the cores are
    busy with the requests' other work then, and on this 2-core machine the ONNX int8 model costs 10-30 % less CPU
    per text on one thread than on two (3.1-3.9 against 3.5-5.6 ms a short query in batches of 4-32). A request
    alone runs in the default form, which the embedder may time against its form for load (`OnnxEmbedder`: a lone
    pass keeps whichever is faster on the machine).

    `submit_then` hands the worker what the caller does next with the vectors (a search: its index step). The
    worker runs it right after the pass when the pass served that request alone and nobody waits for the next one:
    a search then crosses threads once instead of twice (back to the event loop, out to an index thread, back
    again: about 0.45 ms of a 10k-tool search here). Under load it does not: the next pass would wait for it.

    A pass takes the queued requests by owner in turn (one of each owner, then a second of each, ...), up to
    `max_texts`: one key's eight queued 8-part searches used to fill the passes ahead of another caller's short
    query, which now rides in the next pass."""

    def __init__(self, inner: Embedder, max_wait: float = 0.002, max_texts: int = 64) -> None:
        self.inner = inner
        self._under_load = getattr(inner, "embed_under_load", None)
        self.max_wait = max_wait
        self.max_texts = max_texts
        self.passes = 0  # forward passes run
        self.requests = 0  # requests served
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._held: OrderedDict[str | None, deque[_Request]] = OrderedDict()  # the worker's, by owner, in turn
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._busy = False

    def submit(self, texts: Sequence[str], owner: str | None = None) -> Future[list[Vector]]:
        """Queue texts to embed for `owner`; the future holds their vectors."""
        request = _Request(list(texts), owner=owner)
        if not request.texts:
            request.future.set_result([])
            return request.future
        self._enqueue(request)
        return request.future

    def _enqueue(self, request: _Request) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="query-embedder", daemon=True)
                self._thread.start()
        self._queue.put(request)

    def submit_then(
        self, texts: Sequence[str], then: Callable[[list[Vector]], Any], owner: str | None = None
    ) -> Future[tuple[list[Vector], Any]]:
        """Queue texts to embed; the future holds (their vectors, `then(vectors)` when the worker ran it, else
        None: the caller runs its next step itself). An exception of `then` is the future's."""
        request = _Request(list(texts), then=then, owner=owner)
        if not request.texts:
            request.future.set_result(([], None))
            return request.future
        self._enqueue(request)
        return request.future

    def warm(self) -> None:
        """Load what a pass under load runs too (the embedder's `embed_under_load`), so the first burst of
        concurrent searches does not wait for it."""
        if self._under_load is not None:
            self._under_load(["warm up"])

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """Blocking form of submit, for callers on a thread."""
        return self.submit(texts).result()

    def close(self) -> None:
        """Stop the worker after the queued requests."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=10)

    def _hold(self, item: _Request | None) -> None:
        if item is None:
            self._stopping = True  # stop once what is held has been embedded
        else:
            self._held.setdefault(item.owner, deque()).append(item)

    def _collect(self) -> list[_Request]:
        """The next pass: what is queued (waiting up to max_wait for more while under load), taken one request per
        owner in turn until the pass holds `max_texts` texts (at least one request)."""
        held = sum(len(r.texts) for waiting in self._held.values() for r in waiting)
        deadline = time.perf_counter() + (self.max_wait if self._busy else 0.0)
        while not self._stopping:  # everything queued now: a caller's turn must not wait behind the pass's size
            try:
                remaining = deadline - time.perf_counter() if held < self.max_texts else 0.0
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            self._hold(item)
            held += len(item.texts) if item is not None else 0
        batch: list[_Request] = []
        size = 0
        while self._held and size < self.max_texts:
            for owner in list(self._held):
                waiting = self._held[owner]
                request = waiting.popleft()
                batch.append(request)
                size += len(request.texts)
                if waiting:
                    self._held.move_to_end(owner)  # served this round: behind the others for the next
                else:
                    del self._held[owner]
                if size >= self.max_texts:
                    break
        return batch

    def _work(self) -> None:
        while True:
            if not self._held:
                if self._stopping:
                    self._stopping = False  # a later submit starts a new worker
                    return
                self._hold(self._queue.get())
                continue
            batch = self._collect()
            self._busy = len(batch) > 1
            texts = [text for request in batch for text in request.texts]
            embed = self._under_load if self._busy and self._under_load is not None else self.inner.embed
            try:
                vectors = embed(texts)
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                for request in batch:
                    _settle(request.future, error=exc)
                continue
            self.passes += 1
            self.requests += len(batch)
            offset = 0
            for request in batch:
                own = vectors[offset : offset + len(request.texts)]
                offset += len(request.texts)
                if request.then is None:
                    _settle(request.future, own)
                elif request.future.cancelled():  # its caller left: no index step for nobody
                    continue
                elif len(batch) == 1 and not self._held and self._queue.empty():
                    try:
                        _settle(request.future, (own, request.then(own)))
                    except Exception as exc:  # noqa: BLE001 - the caller's step failed: the caller's error
                        _settle(request.future, error=exc)
                else:
                    _settle(request.future, (own, None))


def _settle(future: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    """Hand a waiting caller its answer; a caller that gave up (its future cancelled: a code-mode run that ended
    with its `search_tools` in flight, a client gone) gets none. Setting a cancelled future raised
    InvalidStateError, which ended the worker thread, and every later search waited for ever."""
    with contextlib.suppress(InvalidStateError):
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
