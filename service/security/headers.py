"""Headers on every answer.

`X-Content-Type-Options: nosniff`: a browser never reads a JSON body (which may quote a tool's description or a
caller's query) as HTML or script. `Cache-Control: no-store` unless the route set its own: answers carry search
results, tool results, a new key's secret, a caller's tools and usage, and a browser or a proxy in between kept
them (no header at all lets a cache store them and reuse them heuristically). The console's pages and files say
`no-cache` with their own CSP (console/routes.py); /events says `no-store` itself."""

from __future__ import annotations

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

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                added = [header for header in (NOSNIFF, NO_STORE) if header[0] not in names]
                if added:
                    message = {**message, "headers": [*headers, *added]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
