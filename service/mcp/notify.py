"""`notifications/tools/list_changed` to the clients of both protocol eras, one session or all of them.

- Handshake era (2025 protocol versions): each connection is registered under its session key when it is
  first seen and unregistered when it closes; it gets the notification on the request's stream when the
  change comes from its own request, otherwise on its standalone stream (stdio pipe, HTTP GET stream).
- 2026 era (`subscriptions/listen`): the SDK's `ListenHandler` serves the streams over a bus that records
  which session opened each stream, so a session's activation reaches only that session's listeners while an
  upstream change reaches everyone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.lowlevel
import mcp.types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import ListenHandler, ServerEvent, ToolsListChanged

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


class Notifier:
    """Tells connected clients that their tool list changed."""

    def __init__(self) -> None:
        self.bus = SessionScopedBus()
        self._listen = ListenHandler(self.bus)
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
        """Serve one `subscriptions/listen` stream on behalf of a session."""
        token = _LISTENING_SESSION.set(session)
        try:
            return await self._listen(ctx, params)
        finally:
            _LISTENING_SESSION.reset(token)

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
