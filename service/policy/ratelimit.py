"""Token buckets per API key: the `RateLimiter` protocol the key resolver charges, and its in-process buckets
(one replica; several replicas share buckets in Redis through cluster/ratelimit.py, which implements it too)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class RateLimiter(Protocol):
    """Buckets of `burst` tokens per key refilled at `rate` tokens per second; `enabled` is False at rate 0."""

    rate: float
    burst: float

    @property
    def enabled(self) -> bool: ...

    async def acquire_async(self, key: str, cost: float = 1.0) -> float:
        """Take `cost` tokens from the key's bucket: 0.0 when granted, else the seconds until it would be."""
        ...


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TokenBucketLimiter:
    """`burst` tokens per key, refilled at `rate_per_minute / 60` per second; a request takes one token."""

    def __init__(
        self,
        rate_per_minute: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        self.rate = rate_per_minute / 60.0
        self.burst = float(max(1, burst))
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def acquire(self, key: str, cost: float = 1.0) -> float:
        """Take `cost` tokens from the key's bucket: 0.0 when granted, else the seconds until it would be."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = _Bucket(self.burst, now)
                self._buckets[key] = bucket
                self._evict(now)
            else:
                self._buckets.move_to_end(key)
                bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
                bucket.updated = now
            if bucket.tokens >= cost:
                bucket.tokens -= cost
                return 0.0
            return (cost - bucket.tokens) / self.rate

    async def acquire_async(self, key: str, cost: float = 1.0) -> float:
        """`acquire` for async callers (the `RateLimiter` protocol)."""
        return self.acquire(key, cost)

    def _evict(self, now: float) -> None:
        # Forgetting a bucket refills it, so only buckets that would be full by now are dropped early;
        # past the bound the least recently used go regardless.
        while len(self._buckets) > self.max_keys:
            key, bucket = next(iter(self._buckets.items()))
            if (
                bucket.tokens + (now - bucket.updated) * self.rate < self.burst
                and len(self._buckets) < 2 * self.max_keys
            ):
                break
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
