"""What a search alone does on the event loop while its embedding pass runs: its lexical queries.

A lone short query's pass runs on one intra-op thread (the embedder's choice on this 2-core machine: "one core
fewer"), so the other core waits for the pass, and the index step after it ran the lexical queries too. Those need
the query's words only. The embedder tells the search when its pass begins (`MicroBatcher.submit_then`'s
`started`): the event loop then runs them on the free core (qdrant-edge holds the GIL for a query; the model's
pass does not), and the index step on the embedder's thread finds them done. They start only once the pass has
begun: run before it, they held the GIL that the embedder's thread needs to start it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from indexer.index.base import Hit, SearchFilter, lexical_queries
from indexer.lexical import SparseVector

T = TypeVar("T")


class Once(Generic[T]):
    """A value computed by whichever thread asks first; a thread that asks meanwhile waits for it. A failure is
    not kept: the next caller computes again (and meets the error itself)."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute: Callable[[], T] | None = compute
        self._value: T | None = None
        self._lock = threading.Lock()

    def __call__(self) -> T:
        with self._lock:
            if self._compute is not None:
                self._value = self._compute()
                self._compute = None
            return self._value  # type: ignore[return-value]

    def quietly(self) -> None:
        """Compute it now if nobody has; an error is left for the next caller."""
        try:
            self()
        except Exception:  # noqa: BLE001, S110 - the index step asks again and fails the search with it
            pass


def early_lexical(index: Any, sparse: Sequence[SparseVector], where: SearchFilter, limit: int) -> Once[list[list[Hit]]]:
    """The lexical hits of a search's texts (`pooled_search` asks the same queries), computed once."""
    queries = lexical_queries([(None, vector) for vector in sparse], limit)
    return Once(lambda: index.search(queries, where))  # type: ignore[no-any-return]


def pass_started(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Future[bool], Callable[[bool], None]]:
    """A future of whether the search's pass runs alone, and the callback that settles it from any thread."""
    began: asyncio.Future[bool] = loop.create_future()

    def settle(alone: bool) -> None:
        if not began.done():
            began.set_result(alone)

    return began, lambda alone: loop.call_soon_threadsafe(settle, alone)
