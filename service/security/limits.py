"""A bound on request bodies, checked before a route parses anything (413 problem+json naming the limit)."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import NUL_REASON, InvalidRequest
from service.security.hosts import send_problem


def too_large_body(limit: int, path: str) -> bytes:
    """The 413 problem of a body over `limit` bytes."""
    return json.dumps(
        {
            "type": "https://toolscout.dev/problems/payload-too-large",
            "title": "Request body too large",
            "status": 413,
            "detail": body_too_large_detail(limit),
            "instance": path,
            "limit": "policy.max_body_bytes",
            "max_bytes": limit,
        }
    ).encode()


def body_too_large_detail(limit: int) -> str:
    """The detail text of a 413."""
    return f"The request body is larger than the limit of {limit} bytes (policy.max_body_bytes)"


class BodySizeLimitMiddleware:
    """Refuse bodies above `max_bytes`: by Content-Length at once, or while a chunked body streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_bytes <= 0:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        for key, value in scope.get("headers", []):
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await send_problem(send, 413, too_large_body(self.max_bytes, path))
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # An HTTPException, because FastAPI turns any other error while reading a body into a 400.
                    raise HTTPException(413, body_too_large_detail(self.max_bytes))
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except HTTPException as exc:
            if exc.status_code != 413 or started:
                raise
            await send_problem(send, 413, too_large_body(self.max_bytes, path))


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
        instance = scope.get("path", "").replace("\x00", "%00")
        await send_problem(send, error.status, json.dumps(error.problem(instance)).encode())
