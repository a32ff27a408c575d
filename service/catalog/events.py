"""In-process pub/sub of catalog events, served to MCP front ends as Server-Sent Events by GET /events.

Publishers (the upstream pool after a `tools/list_changed` re-sync, registrations and deletions) call
`publish_tools_changed(resources, server_id)`; every subscriber gets every event published while it is
subscribed. A subscriber that stops reading loses its subscription at `buffer` pending events (its stream
ends; front ends reconnect and refetch), so a stuck client never holds memory or blocks a publisher.
With several API replicas this moves to a shared broker, like the rest of the per-session state.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

if TYPE_CHECKING:
    from service.resources import Resources

logger = logging.getLogger(__name__)

TOOLS_CHANGED = "tools_changed"


@dataclass(frozen=True)
class CatalogEvent:
    """One event: its SSE name and JSON data."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    # The tools that changed, when known: never sent, only read to tell whom the event concerns (event_routes.py).
    names: frozenset[str] | None = None


class EventHub:
    """Fan-out of catalog events to the current subscribers."""

    def __init__(self, buffer: int = 256) -> None:
        self.buffer = buffer
        self._subscribers: set[MemoryObjectSendStream[CatalogEvent]] = set()
        self._streams: Counter[str] = Counter()  # open GET /events streams per key
        self.closed = False

    def reserve(self, owner: str, limit: int) -> bool:
        """Take one of `limit` stream places of this owner (no await between the check and the count)."""
        if limit > 0 and self._streams[owner] >= limit:
            return False
        self._streams[owner] += 1
        return True

    def release(self, owner: str) -> None:
        self._streams[owner] -= 1
        if self._streams[owner] <= 0:
            del self._streams[owner]

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, event: CatalogEvent) -> None:
        """Deliver to every subscriber without waiting; a full subscriber is dropped."""
        for stream in list(self._subscribers):
            try:
                stream.send_nowait(event)
            except anyio.WouldBlock:
                logger.warning("an event subscriber fell %d events behind; ending its stream", self.buffer)
                self._subscribers.discard(stream)
                stream.close()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.discard(stream)

    def close(self) -> None:
        """End every subscriber's stream, and those that subscribe later at once: the server is stopping, and an
        open GET /events (any key may hold 16) kept it waiting for ever."""
        self.closed = True
        for stream in list(self._subscribers):
            stream.close()
        self._subscribers.clear()

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[MemoryObjectReceiveStream[CatalogEvent]]:
        """Receive the events published until the block exits (or the hub closes)."""
        send, receive = anyio.create_memory_object_stream[CatalogEvent](self.buffer)
        if self.closed:
            send.close()
        else:
            self._subscribers.add(send)
        try:
            yield receive
        finally:
            self._subscribers.discard(send)
            send.close()
            receive.close()


def event_hub(resources: Resources) -> EventHub:
    """The app's hub, created on first use."""
    if resources.events is None:
        resources.events = EventHub()
    return resources.events


def shown_tools(resources: Resources, names: Iterable[str]) -> set[str]:
    """Of these tools, those in the name directory: active and not held for review, the ones callers are shown. A
    change concerns callers only for a tool shown before or after it: one held since its registration (a 404 to
    all but admins) was never shown, and /events must not tell of it."""
    directory = resources.retriever.directory if resources.retriever is not None else None
    return {name for name in names if directory is not None and directory.server(name) is not None}


def publish_tools_changed(resources: Resources, server_id: str | None, names: Iterable[str] | None = None) -> None:
    """The tools of a server changed (None: the catalog changed in ways not tied to one server); `names`: which
    ones, when known (only callers that may use one of them hear of it)."""
    changed = frozenset(names) if names is not None else None
    event_hub(resources).publish(CatalogEvent(TOOLS_CHANGED, {"server": server_id}, changed))
