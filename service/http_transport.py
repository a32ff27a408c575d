"""HTTP over loopback: httpx transports for calling a Toolscout API, and the uvicorn server of `serve` and of the MCP
front end's HTTP transport, which says where it listens once its socket accepts connections.

Without TCP_NODELAY a request whose headers and body leave in separate segments waits out the peer's delayed
ACK (about 40 ms a call on Linux)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    import uvicorn

NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def nodelay_transport() -> httpx.HTTPTransport:
    """A sync transport with Nagle's algorithm off."""
    return httpx.HTTPTransport(socket_options=NODELAY)


def async_nodelay_transport() -> httpx.AsyncHTTPTransport:
    """An async transport with Nagle's algorithm off."""
    return httpx.AsyncHTTPTransport(socket_options=NODELAY)


def listening_server(
    config: uvicorn.Config, on_listening: Callable[[], None], on_stopping: Callable[[], None] | None = None
) -> uvicorn.Server:
    """A uvicorn server calling `on_listening` once, after a start-up that succeeded: not before the model load
    and warm-up (seconds), when a URL printed first would be refused; and `on_stopping` when it begins to stop,
    before it waits for the open connections to close (a stream that never ends would keep it waiting)."""
    import uvicorn

    class ListeningServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                on_listening()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if on_stopping is not None:
                on_stopping()
            await super().shutdown(sockets)

    return ListeningServer(config)
