"""The streamable-HTTP sessions of the front end, bounded per client and in all, so one client cannot lock others out.

A client is a remote address as the ASGI server sees it (the TCP peer, or what a proxy of `policy.trusted_proxies`
forwards): the front end has one bearer key, so the credential tells no two clients apart. A session that would take
a client past `frontend.http_max_sessions_per_client`, or the front end past `frontend.http_max_sessions`, first
closes an idle session (no request in flight: no open GET stream, no call running): that client's least recently
used one, or at the front end's bound the least recently used one of the client holding the most. It is closed by a
DELETE through the SDK, as its client would: the SDK terminates its transport and forgets it (its id answers 404),
its message loop ends, and the connection's exit stack drops its dynamic-mode state and notification registration.
When no session of theirs is idle, a client at its bound gets a 429 and the full front end a 503 (problem+json). A
session answers only the client that opened it: to another its id is unknown (404). A
request that cannot open a session (not a POST, or refused by the SDK's Host, Origin and Content-Type checks) closes
none.

Handshake-era (2025) sessions only: 2026-era requests open no SDK session and pass through untouched.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import counted
from service.mcp.guard import send_problem

logger = logging.getLogger(__name__)

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode("latin-1")
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode("latin-1")
# What a DELETE closing a session carries over from the request that opened it: its address and its Host and
# Origin, which the SDK's DNS-rebinding check accepted then.
_REPLAYED_SCOPE = ("type", "asgi", "http_version", "scheme", "server", "client", "root_path", "path", "raw_path")
_REPLAYED_HEADERS = (b"host", b"origin")


@dataclass
class HttpSession:
    """One open session: whose it is, how to close it, and whether a request of it is in flight."""

    id: str
    client: str
    closing_scope: dict[str, Any]
    in_flight: int = 1  # opened by a request still being answered


@dataclass
class SessionTable:
    """The open sessions per client, least recently used first, and the sessions being opened.

    A session the SDK ended unseen (idle for `frontend.dynamic_idle_seconds`, crashed) stays counted until its id
    answers 404 or it is chosen to make room (the least recently used are chosen first): the table does not count
    fewer sessions than the SDK holds, so the SDK's own bound (the same number) does not refuse first."""

    per_client: int
    total: int
    clients: dict[str, OrderedDict[str, HttpSession]] = field(default_factory=dict)
    by_id: dict[str, HttpSession] = field(default_factory=dict)
    opening: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.by_id)

    def held(self, client: str) -> int:
        """Sessions a client holds, open or being opened."""
        return len(self.clients.get(client, ())) + self.opening.get(client, 0)

    def find(self, session_id: str) -> HttpSession | None:
        return self.by_id.get(session_id)

    def _least_recently_used_idle(self, client: str) -> HttpSession | None:
        return next((s for s in self.clients.get(client, {}).values() if not s.in_flight), None)

    def admit(self, client: str) -> list[HttpSession] | str:
        """Reserve room for a session of `client`: the sessions to close first, or why there is no room."""
        victims: list[HttpSession] = []
        if self.held(client) >= self.per_client:
            victim = self._least_recently_used_idle(client)
            if victim is None:
                return "client"
            victims.append(self.forget(victim))
        if sum(self.opening.values()) + len(self) >= self.total:
            heaviest = sorted(self.clients, key=lambda c: len(self.clients[c]), reverse=True)
            victim = next(filter(None, map(self._least_recently_used_idle, heaviest)), None)
            if victim is None:
                return "total"
            victims.append(self.forget(victim))
        self.opening[client] = self.opening.get(client, 0) + 1
        return victims

    def opened(self, client: str, session: HttpSession | None) -> None:
        """The opening request of a reserved session was answered (None: it opened none)."""
        self.opening[client] -= 1
        if not self.opening[client]:
            del self.opening[client]
        if session is not None:
            self.clients.setdefault(client, OrderedDict())[session.id] = session
            self.by_id[session.id] = session

    def used(self, session: HttpSession) -> None:
        """A request of the session starts: it is the client's most recently used and not idle."""
        session.in_flight += 1
        self.clients.get(session.client, OrderedDict()).move_to_end(session.id)

    def done(self, session: HttpSession) -> None:
        """A request of the session ended."""
        session.in_flight -= 1

    def forget(self, session: HttpSession) -> HttpSession:
        """Stop counting a session (closed, or about to be)."""
        self.by_id.pop(session.id, None)
        sessions = self.clients.get(session.client)
        if sessions is not None:
            sessions.pop(session.id, None)
            if not sessions:
                del self.clients[session.client]
        return session


def _header(scope: Scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == name), None)


class SessionBoundMiddleware:
    """Keeps the front end's streamable-HTTP sessions within `table`'s bounds (see the module docstring)."""

    def __init__(
        self, app: ASGIApp, path: str, table: SessionTable, security: TransportSecuritySettings | None
    ) -> None:
        self.app = app
        self.path = path
        self.table = table
        self.checks = TransportSecurityMiddleware(security)  # the SDK's Host, Origin and Content-Type checks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = _header(scope, _VERSION_HEADER) if scope["type"] == "http" else None
        if scope["type"] != "http" or scope["path"] != self.path or version not in (None, *HANDSHAKE_PROTOCOL_VERSIONS):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        session_id = _header(scope, _SESSION_HEADER)
        if session_id is None and scope["method"] == "POST":
            refused = await self.checks.validate_request(Request(scope, receive), is_post=True)
            if refused is None:  # a request the SDK refuses for its headers must not close a session first
                await self._open(client, scope, receive, send)
                return
        session = self.table.find(session_id) if session_id is not None else None
        if session is not None and session.client != client:
            # The front end has one key, which tells no two clients apart: a session id read off one client (a log,
            # a shared proxy) let another drive its session, read its stream and end it. Bound to the address that
            # opened it, it answers any other as an unknown id does (the SDK's own 404), so a guesser learns nothing.
            await self.app(_as_unknown_session(scope), receive, send)
            return
        if session is None:
            await self.app(scope, receive, send)  # the SDK answers: an unknown id is its 404
            return
        await self._serve(session, scope, receive, send)

    async def _open(self, client: str, scope: Scope, receive: Receive, send: Send) -> None:
        admitted = self.table.admit(client)
        if isinstance(admitted, str):
            await self._refuse(admitted, client, send)
            return
        opened: HttpSession | None = None

        async def watch(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                session_id = dict(message.get("headers") or []).get(_SESSION_HEADER)
                if session_id is not None:
                    opened = HttpSession(session_id.decode("latin-1"), client, _closing_scope(scope, session_id))
                    self.table.opened(client, opened)
            await send(message)

        try:
            for victim in admitted:
                with anyio.CancelScope(shield=True):  # the table no longer counts it: the SDK must not either
                    await self._close(victim)
            await self.app(scope, receive, watch)
        finally:
            if opened is None:
                self.table.opened(client, None)
            else:
                self.table.done(opened)

    async def _serve(self, session: HttpSession, scope: Scope, receive: Receive, send: Send) -> None:
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.table.used(session)
        try:
            await self.app(scope, receive, watch)
        finally:
            self.table.done(session)
            if status == 404 or (scope["method"] == "DELETE" and 200 <= status < 300):
                self.table.forget(session)  # ended by its client, or by the SDK (idle, crashed)

    async def _close(self, session: HttpSession) -> None:
        """End a session through the SDK, as a DELETE of its own client would."""
        status = 0

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await self.app(session.closing_scope, receive, record)
        if status not in (200, 404):
            logger.warning("closing MCP session %s of %s to make room answered %s", session.id, session.client, status)
        else:
            logger.info("closed the least recently used idle MCP session of %s to make room", session.client)

    async def _refuse(self, reason: str, client: str, send: Send) -> None:
        if reason == "client":
            detail = (
                f"{client} holds {counted(self.table.per_client, 'MCP session')} "
                "(frontend.http_max_sessions_per_client), each with a request in flight; end one (DELETE) before "
                "opening another"
            )
            await send_problem(send, 429, "too-many-sessions", "Too many MCP sessions", detail)
            return
        detail = (
            f"The front end holds {self.table.total} MCP sessions (frontend.http_max_sessions), "
            "each with a request in flight; retry when one ends"
        )
        await send_problem(send, 503, "sessions-full", "No room for another MCP session", detail)


# No session has this id: the SDK's ids are uuid4 hex, whose 13th digit is 4.
_NO_SESSION = b"0" * 32


def _as_unknown_session(scope: Scope) -> Scope:
    """The request with a session id no session has: the SDK answers it exactly as it answers an unknown id."""
    headers = [(k, _NO_SESSION if k.lower() == _SESSION_HEADER else v) for k, v in scope["headers"]]
    return {**scope, "headers": headers}


def _closing_scope(scope: Scope, session_id: bytes) -> dict[str, Any]:
    """The scope of a DELETE ending the session that `scope`'s request opened."""
    closing = {key: scope[key] for key in _REPLAYED_SCOPE if key in scope}
    headers = [(k, v) for k, v in scope["headers"] if k.lower() in _REPLAYED_HEADERS]
    closing.update(method="DELETE", query_string=b"", headers=[*headers, (_SESSION_HEADER, session_id)])
    return closing
