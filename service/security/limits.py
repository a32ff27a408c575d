"""Bounds on request bodies, checked before a route parses anything: their size (413 problem+json naming the limit)
and how slowly they may come (408)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl

import anyio
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import InvalidRequest, echoed_path
from service.security.hosts import send_problem
from service.security.request_body import NUL_REASON

# The routes whose bodies may be as large as policy.max_body_bytes: registrations. Every other body is a call, a
# search, a script or a form, held to policy.max_call_body_bytes: parsing costs ~1 s and ~60 bytes of memory a byte
# of small JSON values, on the event loop, and only a catalog needs megabytes.
REGISTRATION_PATHS = frozenset({"/tools", "/console/api/tools"})
# The console's sign-in holds one key (512 characters at most) and is read before any key is known: 1.9 MB bodies
# posted to it without a key, from 4 connections, held an admin's 120 KB /execute at 3.1 s (p50; 95 ms without),
# each parsed on the one thread that parses long bodies (tests/security/test_key_before_body.py).
SIGN_IN_PATHS = frozenset({"/console/api/session"})
SIGN_IN_MAX_BYTES = 4096


# A body comes whole within BODY_GRACE_SECONDS of its request, plus a second for each BODY_MIN_BYTES_PER_SECOND it
# holds. Nothing bounded it: a client without a key trickled a body to POST /execute a byte a second (FastAPI reads
# the body before it resolves the caller) and held the request, and a connection, for as long as it liked. uvicorn
# bounds the head (service/http_transport.py).
BODY_GRACE_SECONDS = 10.0
BODY_MIN_BYTES_PER_SECOND = 10_000


def slow_body(path: str) -> bytes:
    """The 408 problem of a body that did not come in time."""
    return json.dumps(
        {
            "type": "https://toolscout.dev/problems/request-timeout",
            "title": "Request body too slow",
            "status": 408,
            "detail": f"The request body did not come whole in time ({BODY_GRACE_SECONDS:g} s, then a second for "
            f"each {BODY_MIN_BYTES_PER_SECOND} bytes)",
            "instance": echoed_path(path),
        }
    ).encode()


@dataclass(frozen=True)
class BodyLimit:
    """A limit on a body and the setting that sets it."""

    max_bytes: int
    setting: str

    def detail(self) -> str:
        return f"The request body is larger than the limit of {self.max_bytes} bytes ({self.setting})"

    def problem(self, path: str) -> bytes:
        """The 413 problem of a body over this limit."""
        return json.dumps(
            {
                "type": "https://toolscout.dev/problems/payload-too-large",
                "title": "Request body too large",
                "status": 413,
                "detail": self.detail(),
                "instance": echoed_path(path),
                "limit": self.setting,
                "max_bytes": self.max_bytes,
            }
        ).encode()


class BodySizeLimitMiddleware:
    """Refuse bodies above the route's limit (0: none) by Content-Length at once, or while a chunked body streams
    in; and bodies that come too slowly, whatever the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_call_bytes: int | None = None) -> None:
        self.app = app
        self.registration = BodyLimit(max_bytes, "policy.max_body_bytes")
        calls = max_bytes if max_call_bytes is None or max_bytes <= 0 else min(max_bytes, max_call_bytes)
        self.call = BodyLimit(calls, "policy.max_call_body_bytes" if calls < max_bytes else "policy.max_body_bytes")
        self.sign_in = BodyLimit(SIGN_IN_MAX_BYTES, "the console's sign-in, one key")

    def limit(self, scope: Scope) -> BodyLimit:
        path = scope.get("path", "")
        if path in SIGN_IN_PATHS and 0 < SIGN_IN_MAX_BYTES < self.call.max_bytes:
            return self.sign_in
        return self.registration if path in REGISTRATION_PATHS else self.call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limit(scope) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        for key, value in scope.get("headers", []) if limit.max_bytes > 0 else ():
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit.max_bytes:
                    await send_problem(send, 413, limit.problem(path))
                    return
        received = 0
        started = timed_out = False
        body_started, body_done = time.monotonic(), False

        async def limited_receive() -> Message:
            nonlocal received, body_done, started, timed_out
            if body_done:  # after the body: a stream's wait for the client to leave, unbounded
                return await receive()
            try:
                deadline = body_started + BODY_GRACE_SECONDS + received / BODY_MIN_BYTES_PER_SECOND
                with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                # The 408 is the answer (closing the connection, whose rest of a body would be read on); the app
                # sees a client gone, and whatever it answers to that is dropped.
                if not started:
                    await send_problem(send, 408, slow_body(path), [(b"connection", b"close")])
                    started = timed_out = True
                body_done = True
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if 0 < limit.max_bytes < received:
                    raise HTTPException(413, limit.detail())
            else:
                body_done = True
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if timed_out:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except HTTPException as exc:
            if exc.status_code != 413 or started:
                raise
            await send_problem(send, 413, limit.problem(path))


def nul_in_url(scope: Scope) -> str | None:
    """The pointer of the part of the URL (`/path` or `/query/<name>`) that holds a NUL character, if one does."""
    if "\x00" in scope.get("path", ""):
        return "/path"
    query = scope.get("query_string", b"")
    if b"%00" in query or b"\x00" in query:
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                return "/query/" + name.replace("\x00", "")
        return "/query"
    return None


class NulInUrlMiddleware:
    """Refuse a URL whose path or query holds a NUL character (%00): no name, id or filter has one, and PostgreSQL
    text cannot hold one (every lookup with it was a 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pointer = nul_in_url(scope) if scope["type"] == "http" else None
        if pointer is None:
            await self.app(scope, receive, send)
            return
        error = InvalidRequest(
            f"Invalid request: {pointer}: {NUL_REASON}", errors=[{"pointer": pointer, "reason": NUL_REASON}]
        )
        instance = echoed_path(scope.get("path", "").replace("\x00", "%00"))
        await send_problem(send, error.status, json.dumps(error.problem(instance)).encode())
