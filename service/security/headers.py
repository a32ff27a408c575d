"""Headers on every answer.

`X-Content-Type-Options: nosniff`: a browser never reads a JSON body (which may quote a tool's description or a
caller's query) as HTML or script. `Cache-Control: no-store` unless the route set its own: answers carry search
results, tool results, a new key's secret, a caller's tools and usage, and a browser or a proxy in between kept
them (no header at all lets a cache store them and reuse them heuristically). The console's pages and files say
`no-cache` with their own CSP (console/routes.py); /events says `no-store` itself.

A redirect to this service (Starlette's for a trailing slash: `/console/` to `/console`) points at a path only:
Starlette wrote the request's Host and scheme into it, so `Host: 6.6.6.6` got `Location: http://6.6.6.6/console`
(any IP literal passes the host check), and behind a proxy that terminates TLS every such redirect left https."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOSNIFF = (b"x-content-type-options", b"nosniff")
NO_STORE = (b"cache-control", b"no-store")


class ResponseHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        host = next((value for name, value in scope.get("headers", []) if name.lower() == b"host"), b"")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [own_path(pair, host) for pair in message.get("headers", [])]
                names = {name.lower() for name, _ in headers}
                added = [header for header in (NOSNIFF, NO_STORE) if header[0] not in names]
                message = {**message, "headers": [*headers, *added]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def own_path(header: tuple[bytes, bytes], host: bytes) -> tuple[bytes, bytes]:
    """A `Location` naming this request's own Host, as its path and query only; any other header as it is."""
    name, value = header
    if name.lower() != b"location" or not host:
        return header
    try:
        url = urlsplit(value.decode("latin-1"))
    except ValueError:
        return header
    if url.scheme not in ("http", "https") or url.netloc.encode("latin-1").lower() != host.lower():
        return header
    path = url.path or "/"
    if path.startswith(("//", "/\\")):  # as a Location alone, `//evil.example` is another host
        return header
    return name, (path + (f"?{url.query}" if url.query else "")).encode("latin-1")
