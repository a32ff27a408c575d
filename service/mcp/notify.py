"""`notifications/tools/list_changed` to the clients of both protocol eras, one session or all of them.

- Handshake era (2025 protocol versions): each connection is registered under its session key when it is
  first seen and unregistered when it closes; it gets the notification on the request's stream when the
  change comes from its own request, otherwise on its standalone stream (stdio pipe, HTTP GET stream).
- 2026 era (`subscriptions/listen`): the SDK's `ListenHandler` serves the streams over a bus that records
  which session opened each stream, so a session's activation reaches only that session's listeners while an
  upstream change reaches everyone. The streams are bounded per client address and in all, as HTTP sessions are
  (`ListenStreams`): the SDK's own bound, 1,024 in all, let one client hold every stream and refused everyone
  else's ("Subscription limit reached").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import mcp.types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY, ListenHandler, ServerEvent, ToolsListChanged

logger = logging.getLogger(__name__)

# The session whose subscriptions/listen request is being served; read when its stream subscribes.
_LISTENING_SESSION: ContextVar[str | None] = ContextVar("toolscout_listening_session", default=None)


class SessionScopedBus:
    """A `SubscriptionBus` whose listeners belong to sessions, so events can target one session."""

    def __init__(self) -> None:
        self._listeners: dict[object, tuple[str | None, Callable[[ServerEvent], None]]] = {}

    def __len__(self) -> int:
        return len(self._listeners)

    async def publish(self, event: ServerEvent) -> None:
        """Deliver to every listener."""
        await self.publish_to(None, event)

    async def publish_to(self, session: str | None, event: ServerEvent) -> None:
        """Deliver to the listeners of one session (None: all of them)."""
        for owner, listener in list(self._listeners.values()):
            if session is not None and owner != session:
                continue
            try:
                listener(event)
            except (
                Exception
            ):  # fan-out boundary, as in the SDK's bus: one listener must not starve the others
                logger.exception("subscription listener raised; continuing")
        await anyio.lowlevel.checkpoint()

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        """Register a listener for the session being served; returns an idempotent unsubscribe."""
        token = object()
        self._listeners[token] = (_LISTENING_SESSION.get(), listener)

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe


MAX_LISTEN_STREAMS = 1024  # in all, the SDK's bound (or frontend.http_max_sessions when lower)


@dataclass(eq=False)
class _Stream:
    """One listen stream being served: whose it is, and how to end it."""

    client: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ended: anyio.Event = field(default_factory=anyio.Event)


class ListenStreams:
    """The listen streams of each client address, oldest first. A new stream past the client's bound ends that
    client's oldest; past the bound in all, the oldest of the client holding the most: no client can hold every
    stream and lock the others out (a client that listens again has usually dropped its older stream anyway)."""

    def __init__(self, per_client: int, total: int) -> None:
        self.per_client = max(1, per_client)
        self.total = max(1, total)
        self.clients: dict[str, list[_Stream]] = {}
        self.count = 0

    def admit(self, client: str) -> tuple[_Stream, list[_Stream]]:
        """A new stream of `client`, and the streams to end first to make room for it."""
        victims: list[_Stream] = []
        if len(self.clients.get(client, ())) >= self.per_client:
            victims.append(self.release(self.clients[client][0]))
        elif self.count >= self.total:
            victims.append(self.release(max(self.clients.values(), key=len)[0]))
        stream = _Stream(client)
        self.clients.setdefault(client, []).append(stream)
        self.count += 1
        return stream, victims

    def release(self, stream: _Stream) -> _Stream:
        """Stop counting a stream (ended, or about to be)."""
        held = self.clients.get(stream.client, [])
        if stream in held:
            held.remove(stream)
            self.count -= 1
            if not held:
                del self.clients[stream.client]
        return stream


def _client_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The address of the request's client (as the ASGI server sees it, proxies of policy.trusted_proxies
    applied), `stdio` without an HTTP request."""
    client = getattr(ctx.request, "client", None)
    return str(getattr(client, "host", None) or "stdio")


class Notifier:
    """Tells connected clients that their tool list changed."""

    def __init__(self, per_client: int = 64, total: int = MAX_LISTEN_STREAMS) -> None:
        self.bus = SessionScopedBus()
        self.streams = ListenStreams(per_client, min(total, MAX_LISTEN_STREAMS))
        # The SDK's own bound is never reached first: ListenStreams makes room before the handler starts.
        self._listen = ListenHandler(self.bus, max_subscriptions=self.streams.total)
        self._connections: dict[Connection, str] = {}

    @property
    def connections(self) -> int:
        """How many handshake-era connections are registered."""
        return len(self._connections)

    def register(self, session: str, connection: Connection) -> None:
        """Track a handshake-era connection under its session key until it closes."""
        if connection in self._connections:
            return
        self._connections[connection] = session
        connection.exit_stack.callback(self._connections.pop, connection, None)

    async def listen(
        self,
        session: str,
        ctx: ServerRequestContext[Any, Any],
        params: types.SubscriptionsListenRequestParams,
    ) -> types.SubscriptionsListenResult:
        """Serve one `subscriptions/listen` stream on behalf of a session, within the bounds of ListenStreams: a
        stream ended to make room for another ends as a graceful closure does (the result, stamped with its id)."""
        stream, victims = self.streams.admit(_client_of(ctx))
        for victim in victims:
            victim.scope.cancel()
            with anyio.move_on_after(5):
                await victim.ended.wait()  # its slot in the SDK's handler is free once it has unwound
        token = _LISTENING_SESSION.set(session)
        try:
            with stream.scope:
                return await self._listen(ctx, params)
            return types.SubscriptionsListenResult(_meta={SUBSCRIPTION_ID_META_KEY: ctx.request_id})
        finally:
            _LISTENING_SESSION.reset(token)
            self.streams.release(stream)
            stream.ended.set()

    async def tools_changed(
        self,
        session: str | None = None,
        *,
        origin: tuple[Connection, ServerRequestContext[Any, Any]] | None = None,
    ) -> None:
        """Notify one session (None: every session); `origin` is the connection and request causing it."""
        for connection, owner in list(self._connections.items()):
            if session is not None and owner != session:
                continue
            if origin is not None and origin[0] is connection:
                ctx = origin[1]
                try:
                    await ctx.session.send_notification(types.ToolListChangedNotification(), ctx.request_id)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    logger.debug("dropped tools/list_changed: the request's stream is closed")
            else:
                await connection.send_tool_list_changed()
        await self.bus.publish_to(session, ToolsListChanged())

    def close(self) -> None:
        """End every open listen stream gracefully."""
        self._listen.close()
