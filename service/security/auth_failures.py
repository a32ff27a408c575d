"""Failed authentications limited per client address, with a delay that doubles at each failure.

The first `free` wrong keys of an address cost nothing; after that the address must wait 1 s, 2 s, 4 s ...
(at most `max_delay`) before its next attempt is even looked at, so guessing keys costs time, not queries.
An address's failures are forgotten once it has been quiet (no failure, no wait) for `max_delay`; a success
forgets nothing: a holder of one valid key reset its count between guesses at others' keys and was never slowed."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Failures:
    count: int
    blocked_until: float


class FailedAuthLimiter:
    """Per-address count of recent failed authentications and the time until the next attempt is allowed."""

    def __init__(
        self,
        free: int = 5,
        max_delay: float = 300.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = 100_000,
    ) -> None:
        self.free = max(0, free)
        self.max_delay = max_delay
        self.clock = clock
        self.max_addresses = max_addresses
        self._records: OrderedDict[str, _Failures] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, address: str) -> float:
        """Seconds this address must still wait before it may try a key (0.0: go ahead)."""
        with self._lock:
            record = self._records.get(address)
            if record is None:
                return 0.0
            remaining = record.blocked_until - self.clock()
            if -remaining > self.max_delay:
                del self._records[address]  # quiet long enough: forgiven
                return 0.0
            return max(0.0, remaining)

    def failed(self, address: str) -> float:
        """Record a failure; returns the delay now imposed on the address."""
        now = self.clock()
        with self._lock:
            record = self._records.pop(address, None)
            if record is None or now - record.blocked_until > self.max_delay:
                record = _Failures(0, now)  # quiet long enough: a first failure again
            record.count += 1
            delay = 0.0 if record.count <= self.free else min(self.max_delay, 2.0 ** (record.count - self.free - 1))
            record.blocked_until = now + delay
            self._records[address] = record
            while len(self._records) > self.max_addresses:
                self._records.popitem(last=False)
            return delay
