"""Token buckets in Redis, shared by every replica: one Lua script takes tokens atomically.

It implements policy's `RateLimiter` protocol, like the in-process `TokenBucketLimiter`; cluster/runtime.py
installs it in the key resolver. While Redis is unreachable the local bucket of this replica answers instead
(limits per replica: fail safe, never open), and Redis is asked again only every `RETRY_SECONDS`, by one request at
a time, or once the bus has reconnected: a Redis that hangs would otherwise cost every request its timeout."""

from __future__ import annotations

import hashlib
import time

from redis.exceptions import RedisError, ResponseError

from service.cluster.bus import ClusterBus, refuses_writes
from service.policy.ratelimit import TokenBucketLimiter

# KEYS[1] bucket; ARGV rate per second, burst, cost. Redis' own clock, so replicas' clocks do not matter.
# Returns the seconds to wait as a string (a Lua number would be truncated to an integer reply).
TOKEN_BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local wait = 0
if tokens >= cost then
  tokens = tokens - cost
else
  wait = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""
# After a Redis failure, how long the local bucket answers without asking Redis (unless the bus reconnects first).
RETRY_SECONDS = 2.0


class RedisTokenBucketLimiter:
    """`burst` tokens per key, refilled at `rate_per_minute / 60` per second, kept in Redis."""

    def __init__(self, bus: ClusterBus, rate_per_minute: float, burst: int) -> None:
        self.bus = bus
        self.local = TokenBucketLimiter(rate_per_minute, burst)
        self.rate = self.local.rate
        self.burst = self.local.burst
        self._script = bus.redis.register_script(TOKEN_BUCKET_LUA)
        self._retry_at = 0.0  # monotonic time before which a failed Redis is not asked again
        self._probing = False  # a request is asking a failed Redis again
        self._answered = False  # Redis answered a request since its last failure (before the bus reconnected)

    @property
    def enabled(self) -> bool:
        return self.local.enabled

    async def acquire_async(self, key: str, cost: float = 1.0) -> float:
        """Take `cost` tokens from the key's shared bucket: 0.0 when granted, else the seconds until it would be."""
        if not self.enabled:
            return 0.0
        # Keys are hashed: a bucket name never carries a caller id or key id into Redis in clear.
        bucket = self.bus.key("ratelimit", hashlib.sha256(key.encode()).hexdigest()[:32])
        probe = not self.bus.healthy and not self._answered
        if probe:
            if self._probing or time.monotonic() < self._retry_at:
                return self.local.acquire(key, cost)
            self._probing = True  # this request asks Redis again; those arriving meanwhile answer locally
        try:
            wait = await self._script(keys=[bucket], args=[self.rate, self.burst, cost])
        except (RedisError, OSError) as exc:
            if isinstance(exc, ResponseError) and not refuses_writes(exc):
                return self.local.acquire(key, cost)  # Redis refused this key's bucket (another type there) alone
            self.bus.mark_down(exc)
            self._retry_at = time.monotonic() + RETRY_SECONDS
            self._answered = False
            return self.local.acquire(key, cost)
        finally:
            if probe:
                self._probing = False
        self._answered = True  # back: every request asks Redis again, not one at a time until the bus reconnects
        return max(0.0, float(wait))
