"""Turns at a few worker threads, taken caller by caller.

The argument checks share CHECK_THREADS threads. Behind one first-come limiter, a caller who sent eight 1.5 MB
invalid calls at once had every other caller wait behind all eight: an admin's one-line /execute took 2.9 s
(median; 6.2 s p90) while a dev key flooded (bench/argument_flood.py). Here each caller waiting gets the next
free thread in turn, so a caller waits for at most one check of each other waiting caller, however many that
caller has queued."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Turns:
    """At most `slots` holders at once; waiting callers take the free ones in turn (round robin), each caller's
    own waiters first come, first served."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        """How many holders wait (cancelled ones included until their turn is skipped)."""
        return sum(len(queue) for queue in self._waiting.values())

    @asynccontextmanager
    async def turn(self, caller: str) -> AsyncIterator[None]:
        """Hold one slot for the block, once it is this caller's turn."""
        if self._free and not self._waiting:
            self._free -= 1
        else:
            future = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(caller, deque()).append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():  # handed a slot just as it was cancelled
                    self._hand_on()
                raise
        try:
            yield
        finally:
            self._hand_on()

    def _hand_on(self) -> None:
        """Give a released slot to the caller whose turn it is, who then goes to the back of the line."""
        while self._waiting:
            caller, queue = next(iter(self._waiting.items()))
            future = queue.popleft()
            if queue:
                self._waiting.move_to_end(caller)
            else:
                del self._waiting[caller]
            if not future.done():  # a cancelled waiter's turn is skipped
                future.set_result(None)
                return
        self._free += 1
