"""Concurrent readers of the same answer share one query in flight.

A cache entry that expires under load sends every request that arrives before the first query returns to the
database on its own: at a key cache's expiry a burst of requests (keyless ones included, which anyone can send)
took a pool connection each, and a slow database turned that into 503s for every caller."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


class SharedReads:
    def __init__(self) -> None:
        self._in_flight: dict[Hashable, asyncio.Future[object]] = {}

    async def read(self, key: Hashable, query: Callable[[], Awaitable[T]]) -> T:
        """The answer of `query` for `key`, asked once for all callers that ask while it runs. A caller that
        gives up (cancelled) does not cancel the query the others wait for; a failure reaches them all."""
        future = self._in_flight.get(key)
        if future is None:
            future = asyncio.ensure_future(query())
            self._in_flight[key] = future
            future.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(future)  # type: ignore[return-value]

    def _finished(self, key: Hashable, done: asyncio.Future[object]) -> None:
        if self._in_flight.get(key) is done:
            del self._in_flight[key]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have given up, and an unread failure would be logged
