"""GET /events: catalog events as Server-Sent Events (`tools_changed` with data {"server": id})."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from service.catalog.events import CatalogEvent, EventHub, event_hub
from service.deps import CallerDep, ResourcesDep
from service.errors import RateLimited
from service.policy.callers import Caller
from service.policy.keys import key_resolver
from service.policy.service import caller_rules, policy_state, visible_names
from service.resources import Resources

router = APIRouter(tags=["events"])
logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0  # a comment line now and then keeps proxies from closing an idle stream
RETRY_MILLISECONDS = 2000


def format_event(event: CatalogEvent) -> str:
    """One SSE frame."""
    return f"event: {event.kind}\ndata: {json.dumps(event.data, separators=(',', ':'))}\n\n"


def may_see(resources: Resources, caller: Caller, event: CatalogEvent) -> bool:
    """Whether this caller may hear of this event: only of tools it may use when the event names them, else of
    servers it may use (every server for admins)."""
    if caller.is_admin:
        return True
    visible = visible_names(resources, caller)
    if visible is None:
        return True
    server = event.data.get("server")
    if server is None:
        return True  # "something changed" names nothing
    rules = caller_rules(resources, caller)
    if event.names is not None:
        # Only a change of a tool this caller may use concerns it (a removed one included).
        listed = policy_state(resources).listed
        return any(rules.permits(name, str(server), listed.get(name)) for name in event.names)
    by_server = [p for p in rules.allow if p.kind == "server" and p.matches("", str(server))]
    if by_server and not any(p.kind == "server" and p.matches("", str(server)) for p in rules.deny):
        return True  # a server the rules allow by name, even before its tools reach the snapshot
    servers = policy_state(resources).servers
    return any(servers.get(name) == server for name in visible)


async def key_revoked(resources: Resources, caller: Caller) -> bool:
    """Whether a stream's key was revoked since it opened: a stream outlives the request that opened it. The
    resolver's answer is cached per key until any key change this process hears of (its own revocations and, over
    Redis, other replicas') or `policy.key_cache_seconds`, as a cached key is on other routes."""
    try:
        return not await key_resolver(resources).still_active(caller)
    except Exception:  # noqa: BLE001 - the database is away: end the stream, the reconnection is checked
        logger.warning("could not check an event stream's key; ending the stream", exc_info=True)
        return True


class HeldStream(StreamingResponse):
    """A stream that gives its owner's place back however it ends (a client gone before the first byte too)."""

    def __init__(self, hub: EventHub, owner: str, content: AsyncIterator[str], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.hub, self.owner = hub, owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.hub.release(self.owner)


@router.get("/events", response_class=StreamingResponse)
async def events(resources: ResourcesDep, caller: CallerDep) -> StreamingResponse:
    """Follow catalog changes; the stream stays open until the client leaves (at most
    `policy.max_event_streams_per_key` at once per key: each holds a connection for as long as it likes)."""
    hub = event_hub(resources)
    owner, limit = caller.key_id or caller.id, resources.settings.policy.max_event_streams_per_key
    if not hub.reserve(owner, limit):
        raise RateLimited(
            f"This key already holds {limit} event streams (policy.max_event_streams_per_key); close one first",
            retry_after=RETRY_MILLISECONDS / 1000,
            limit="policy.max_event_streams_per_key",
        )

    async def stream() -> AsyncIterator[str]:
        async with hub.subscribe() as received:
            yield f"retry: {RETRY_MILLISECONDS}\n: connected\n\n"
            while True:
                event: CatalogEvent | None = None
                try:
                    with anyio.move_on_after(HEARTBEAT_SECONDS):
                        event = await received.receive()
                except anyio.EndOfStream:
                    return  # dropped for falling behind: the client reconnects and refetches
                if await key_revoked(resources, caller):
                    return  # the key was revoked: its next request, a reconnection, is a 401
                if event is None:
                    yield ": heartbeat\n\n"
                elif may_see(resources, caller, event):
                    yield format_event(event)

    return HeldStream(
        hub,
        owner,
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
