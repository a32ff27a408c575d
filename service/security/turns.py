"""Turns at a few worker threads, taken caller by caller: the argument checks' threads
(service/execution/arguments.py) and the thread that parses long request bodies (json_body.py).

The argument checks share CHECK_THREADS threads. Behind one first-come limiter, a caller who sent eight 1.5 MB
invalid calls at once had every other caller wait behind all eight: an admin's one-line /execute took 3.0 s
(median; 6.8 s p90) while a dev key flooded (bench/argument_flood.py). Here a caller holds at most one thread at
a time and the waiting callers take the free ones in turn, so a caller waits for at most one check of each
other caller, however many that caller has queued, and one caller alone never keeps every thread busy."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Turns:
    """At most `slots` holders at once and one per caller; waiting callers take free slots in turn (round
    robin), each caller's own waiters first come, first served."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._holding: set[str] = set()
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        """How many holders wait (cancelled ones included until their turn is skipped)."""
        return sum(len(queue) for queue in self._waiting.values())

    @asynccontextmanager
    async def turn(self, caller: str) -> AsyncIterator[None]:
        """Hold one slot for the block, once it is this caller's turn."""
        if self._free and caller not in self._holding and caller not in self._waiting:
            self._free -= 1
            self._holding.add(caller)
        else:
            future = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(caller, deque()).append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():  # handed a slot just as it was cancelled
                    self._release(caller)
                raise
        try:
            yield
        finally:
            self._release(caller)

    def _release(self, caller: str) -> None:
        self._free += 1
        self._holding.discard(caller)
        self._hand_on()

    def _hand_on(self) -> None:
        """Give the free slots to the waiting callers that hold none, in turn; each served caller goes to the
        back of the line."""
        for caller in list(self._waiting):
            if not self._free:
                return
            if caller in self._holding:
                continue
            queue = self._waiting[caller]
            while queue and queue[0].done():  # a cancelled waiter's turn is skipped
                queue.popleft()
            if queue:
                future = queue.popleft()
                self._free -= 1
                self._holding.add(caller)
                future.set_result(None)
            if queue:
                self._waiting.move_to_end(caller)
            else:
                del self._waiting[caller]
