"""`X-Content-Type-Options: nosniff` on every answer: a browser never reads a JSON body (which may quote a tool's
description or a caller's query) as HTML or script. The console's pages add their own CSP (console/routes.py)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOSNIFF = (b"x-content-type-options", b"nosniff")


class NoSniffMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_nosniff(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == NOSNIFF[0] for name, _ in headers):
                    message = {**message, "headers": [*headers, NOSNIFF]}
            await send(message)

        await self.app(scope, receive, send_nosniff)
