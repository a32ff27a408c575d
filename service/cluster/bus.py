"""The Redis connection of a replica: one pub/sub channel of change events shared by every replica.

Messages are small JSON objects `{"kind": ..., "origin": replica id, ...}`: `catalog` (a catalog change was
committed: followers read the change sequence from SQL) and `keys` (an API key was created or revoked: key
caches forget). The channel only wakes replicas up; SQL stays the record, so an event lost while Redis was
down is caught up by polling, and every reconnection triggers a catch-up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import (
    BusyLoadingError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)

if TYPE_CHECKING:
    from service.supervisor import Supervisor

logger = logging.getLogger(__name__)

BUS_TASK = "cluster-bus"

Handler = Callable[[dict[str, Any]], Awaitable[None]]
PING_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 10.0
MAX_MESSAGE_CHARS = 65_536  # the events this bus publishes are a few hundred characters
# Answers of a Redis that is up but takes no writes at all: a replica (READONLY), one loading its data, one whose
# master is away, one out of memory under `noeviction`, one whose last save failed (MISCONF) or that lacks the
# replicas `min-replicas-to-write` asks for. The buckets cannot be shared there: Redis counts as down.
WRITE_REFUSALS = (ReadOnlyError, BusyLoadingError, MasterDownError, OutOfMemoryError)
REFUSAL_CODES = frozenset({"MISCONF", "NOREPLICAS"})


def refuses_writes(exc: BaseException) -> bool:
    """Whether a Redis error says the server takes no writes (not: this one key's value is of another type)."""
    return isinstance(exc, WRITE_REFUSALS) or (
        isinstance(exc, ResponseError) and str(exc).partition(" ")[0] in REFUSAL_CODES
    )


class ClusterBus:
    """Publish and receive change events over Redis; `healthy` says whether Redis answers."""

    def __init__(self, url: str, prefix: str, replica_id: str, timeout_seconds: float = 1.0) -> None:
        self.redis: Redis = Redis.from_url(
            url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds, decode_responses=True
        )
        self.prefix = prefix
        self.channel = f"{prefix}:events"
        self.replica_id = replica_id
        self.healthy = False
        self.last_error: str | None = None
        self.received = 0
        self._handlers: defaultdict[str, list[Handler]] = defaultdict(list)
        self._on_connect: list[Callable[[], Awaitable[None]]] = []
        self._supervisor: Supervisor | None = None

    def key(self, *parts: str) -> str:
        """A Redis key under this deployment's prefix."""
        return ":".join((self.prefix, *parts))

    def on(self, kind: str, handler: Handler) -> None:
        """Call `handler(message)` for every message of this kind (from any replica, this one included)."""
        self._handlers[kind].append(handler)

    def on_connect(self, handler: Callable[[], Awaitable[None]]) -> None:
        """Call `handler()` after every (re)connection: what was published meanwhile was missed."""
        self._on_connect.append(handler)

    def mark_down(self, exc: BaseException) -> None:
        """Any Redis failure seen by a user of the connection (the rate limiter) counts as Redis down: said once,
        when Redis was up or at the first attempt (a replica started while Redis is down says so too)."""
        if self.healthy or self.last_error is None:
            logger.warning("Redis is unreachable or takes no writes (%s): degraded to local limits and polling", exc)
        self.healthy = False
        self.last_error = f"{exc.__class__.__name__}: {exc}"

    async def publish(self, kind: str, **data: Any) -> bool:
        """Send an event to every replica; False when Redis is down (followers poll meanwhile)."""
        message = json.dumps({"kind": kind, "origin": self.replica_id, **data}, separators=(",", ":"))
        try:
            await self.redis.publish(self.channel, message)
        except (RedisError, OSError) as exc:
            self.mark_down(exc)
            return False
        return True

    def start(self, supervisor: Supervisor) -> None:
        """Listen in the background under the service's supervisor (shown in /readyz as `cluster-bus`)."""
        self._supervisor = supervisor
        supervisor.start(BUS_TASK, self.run)

    async def close(self) -> None:
        """Stop listening and close the connection."""
        if self._supervisor is not None:
            await self._supervisor.stop(BUS_TASK)
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()

    async def run(self) -> None:
        """Listen until cancelled. Redis being unreachable is expected: marked down and retried here with
        backoff; any other error ends the run and the supervisor restarts it."""
        backoff = 0.2
        while True:
            try:
                await self._listen()
            except (RedisError, OSError) as exc:
                self.mark_down(exc)
            except BaseException:
                self.healthy = False
                raise
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF_SECONDS, backoff * 2)
            if self.healthy:
                backoff = 0.2

    async def _listen(self) -> None:
        async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self.channel)
            await self._check()
            if not self.healthy:
                logger.info("connected to Redis; listening on %s", self.channel)
            self.healthy, self.last_error = True, None
            for handler in self._on_connect:
                await handler()
            pinged = time.monotonic()
            while True:
                message = await pubsub.get_message(timeout=PING_SECONDS / 2)
                if message is not None and message.get("type") == "message":
                    await self._dispatch(message["data"])
                if time.monotonic() - pinged >= PING_SECONDS:
                    await self._check()  # a dead server shows here even when no message arrives
                    pinged = time.monotonic()
                    self.healthy = True

    async def _check(self) -> None:
        """A write, not a PING: a replica or a full Redis answers PING and refuses the buckets' writes (the
        `refuses_writes` errors end the listening, which marks Redis down and tries again with backoff)."""
        await self.redis.set(self.key("alive", self.replica_id), "1", px=int(PING_SECONDS * 3000))

    async def _dispatch(self, raw: str) -> None:
        # Anyone who can publish on Redis reaches this: whatever is not a JSON object is skipped, so it neither
        # stops the listener (events published during its restart would be lost) nor reaches a handler. Ours are
        # under a kilobyte: a longer one is not parsed, and one nested past the parser's depth (`[` * 100,000
        # raised RecursionError, which restarted the listener) is skipped too.
        try:
            message = json.loads(raw) if len(raw) <= MAX_MESSAGE_CHARS else None
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, dict):
            logger.warning("ignoring a malformed cluster event: %r", raw[:200])
            return
        self.received += 1
        for handler in self._handlers.get(str(message.get("kind")), ()):
            try:
                await handler(message)
            except Exception:  # noqa: BLE001 - one failing handler must not starve the others
                logger.exception("handling the cluster event %s failed", message.get("kind"))
