"""Dynamic-mode session states in Redis, so that front-end instances behind one load balancer share them.

Only sessions that a client carries from one instance to the next are shared: the 2026-era keys built from
the credential, the `Mcp-Session-Id` header and the client name (`caller:...`). A stdio process, or a
2025-era connection, lives on one instance and stays local. Each state is one JSON value that expires after
`frontend.dynamic_idle_seconds` without use, like the local store's idle sessions. Writes are whole states
(last writer wins): a session is one client, whose searches come one at a time. While Redis is unreachable
every instance keeps its own states and says so once in the log."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.settings import Settings

logger = logging.getLogger(__name__)

SHARED_PREFIXES = ("caller:",)  # session keys that mean the same client on every instance
_UNREACHABLE = object()


class SharedSessions:
    """Reads and writes session states (their activated tools and search ids) in Redis."""

    def __init__(self, url: str, prefix: str, idle_seconds: float, timeout_seconds: float = 1.0) -> None:
        self.redis: Redis = Redis.from_url(
            url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds, decode_responses=True
        )
        self.prefix = prefix
        self.ttl_seconds = max(1, int(idle_seconds))
        self.healthy = True

    @staticmethod
    def shares(key: str) -> bool:
        """Whether this session key names the same client on every instance."""
        return key.startswith(SHARED_PREFIXES)

    def _key(self, session: str) -> str:
        # Hashed: a key never carries a credential-derived value into Redis in clear.
        return f"{self.prefix}:mcp-session:{hashlib.sha256(session.encode()).hexdigest()[:32]}"

    def _down(self, exc: BaseException) -> None:
        if self.healthy:
            logger.warning("Redis is unreachable (%s): dynamic-mode sessions are kept per front end", exc)
        self.healthy = False

    def _up(self) -> None:
        if not self.healthy:
            logger.info("Redis is back: dynamic-mode sessions are shared again")
        self.healthy = True

    async def load(self, session: str) -> dict[str, Any] | None | object:
        """The stored state (None: no such session) or `_UNREACHABLE` when Redis does not answer."""
        try:
            raw = await self.redis.get(self._key(session))
        except (RedisError, OSError) as exc:
            self._down(exc)
            return _UNREACHABLE
        self._up()
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # nested past the parser's depth: `[` * 100,000
            logger.warning("ignoring a malformed shared session state")
            return None
        return value if isinstance(value, dict) else None

    async def save(
        self, session: str, active: OrderedDict[str, dict[str, Any]], searches: OrderedDict[str, str]
    ) -> None:
        """Store a session's state (order kept: least recently used first), renewing its idle expiry."""
        value = json.dumps({"active": list(active.items()), "search_ids": list(searches.items())})
        try:
            await self.redis.set(self._key(session), value, ex=self.ttl_seconds)
        except (RedisError, OSError) as exc:
            self._down(exc)
            return
        self._up()

    async def touch(self, session: str) -> None:
        """Renew a session's idle expiry (it was listed)."""
        try:
            await self.redis.expire(self._key(session), self.ttl_seconds)
        except (RedisError, OSError) as exc:
            self._down(exc)

    async def aclose(self) -> None:
        """Close the connection."""
        try:
            await self.redis.aclose()
        except (RedisError, OSError):
            logger.debug("closing the shared-session connection failed", exc_info=True)


def shared_sessions(settings: Settings) -> SharedSessions | None:
    """The shared store when a Redis URL is set (`frontend.redis_url`, else `cluster.redis_url`)."""
    url = settings.frontend.redis_url or settings.cluster.redis_url
    if not url:
        return None
    cluster = settings.cluster
    return SharedSessions(
        url, cluster.key_prefix, settings.frontend.dynamic_idle_seconds, cluster.redis_timeout_seconds
    )


def unreachable(value: object) -> bool:
    """Whether `load` could not reach Redis."""
    return value is _UNREACHABLE
