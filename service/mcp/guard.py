"""An optional bearer key on the MCP HTTP transport, with failed attempts limited per client address; without
one, the transport answers this machine's own requests only."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import echoed_path
from service.security.auth_failures import FailedAuthLimiter
from service.security.hosts import problem_body
from service.security.hosts import send_problem as send_asgi_problem
from service.security.openmode import relayed


async def send_problem(
    send: Send, status: int, slug: str, title: str, detail: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer with an RFC 9457 problem+json, as the REST API does."""
    await send_asgi_problem(send, status, problem_body(status, slug, title, detail), headers)


class BearerKeyMiddleware:
    """Every request needs `Authorization: Bearer <frontend.http_api_key>`; wrong keys slow their sender."""

    def __init__(self, app: ASGIApp, key: str, failures: FailedAuthLimiter | None = None) -> None:
        self.app = app
        self.key = key.encode()
        self.failures = failures or FailedAuthLimiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        address = (scope.get("client") or ("?", 0))[0]
        wait = self.failures.wait(address)
        if wait > 0:
            detail = f"Too many failed authentications from {address}; retry in {wait:.0f} s"
            retry = [(b"retry-after", str(max(1, int(wait + 0.999))).encode())]
            await send_problem(send, 429, "rate-limited", "Rate limit exceeded", detail, retry)
            return
        presented = b""
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization":
                scheme, _, token = value.partition(b" ")
                presented = token.strip() if scheme.lower() == b"bearer" else b""
        if not presented or not hmac.compare_digest(presented, self.key):
            self.failures.failed(address)
            detail = "This MCP endpoint needs `Authorization: Bearer <key>` (frontend.http_api_key)"
            bearer = [(b"www-authenticate", b"Bearer")]
            await send_problem(send, 401, "unauthorized", "Missing or invalid API key", detail, bearer)
            return
        await self.app(scope, receive, send)


class LocalOnlyMiddleware:
    """The keyless front end (loopback only) acts with its API key for whoever reaches it: a request relayed by a
    reverse proxy in front of it (nginx sends the loopback Host it was told to reach) is refused, 401."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = (scope.get("client") or (None, 0))[0]
        if scope["type"] == "http" and relayed(scope.get("headers", []), client):
            detail = (
                "This MCP endpoint has no key (frontend.http_api_key) and answers this machine's own requests only; "
                "this one came through a proxy"
            )
            await send_problem(send, 401, "unauthorized", "Missing or invalid API key", detail)
            return
        await self.app(scope, receive, send)


# Why the SDK (or Starlette) refused, for the few plain-text answers that say only what.
_HINTS = {
    400: "a request to this endpoint is a JSON-RPC POST (Content-Type: application/json), a GET or a DELETE",
    403: "a browser page of another origin may not call this front end",
    405: "the MCP endpoint takes POST, GET and DELETE",
    413: "a request body holds at most the MCP SDK's 4 MiB",
    421: "on a loopback address the front end answers to loopback Host names only (the bound address, 127.0.0.1, "
    "localhost, ::1)",
}
_PLAIN_MAX_BYTES = 4096


class PlainRefusalsAsProblems:
    """The MCP SDK refuses a foreign Host, a foreign Origin, a wrong Content-Type or a large body with a bare text
    (`Invalid Origin header`), and Starlette an unknown path with `Not Found`: each becomes an RFC 9457 problem
    quoting that text and saying why, like every other refusal of Toolscout's."""

    def __init__(self, app: ASGIApp, endpoint: str = "/mcp") -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The path asked and the one to ask (a newcomer's `curl http://127.0.0.1:8766/` was told the endpoint is
        # "the front end's HTTP path", not which).
        path = echoed_path(str(scope.get("path", "")))
        hints = {**_HINTS, 404: f"nothing at {path}; the MCP endpoint is {self.endpoint} (frontend.http_path)"}
        held: dict[str, Any] | None = None
        text = b""

        async def convert(message: Message) -> None:
            nonlocal held, text
            if message["type"] == "http.response.start":
                content_type = dict(message.get("headers") or []).get(b"content-type", b"")
                if message["status"] >= 400 and (not content_type or content_type.startswith(b"text/plain")):
                    held = message
                    return
            elif held is not None and message["type"] == "http.response.body":
                text = (text + message.get("body", b""))[:_PLAIN_MAX_BYTES]
                if message.get("more_body", False):
                    return
                status = int(held["status"])
                said = text.decode("utf-8", "replace").strip() or "Refused"
                detail = f"{said}: {hints[status]}" if status in hints else said
                extra = [(k, v) for k, v in held.get("headers") or [] if k.lower() in _KEPT_HEADERS]
                await send_problem(send, status, _SLUGS.get(status, "error"), said, detail, extra)
                return
            await send(message)

        await self.app(scope, receive, convert)


_KEPT_HEADERS = (b"allow", b"retry-after", b"www-authenticate", b"mcp-session-id")
_SLUGS = {
    400: "bad-request",
    403: "forbidden-origin",
    404: "not-found",
    405: "method-not-allowed",
    413: "payload-too-large",
    421: "misdirected-request",
}
