"""httpx transports for calling a Toolscout API over loopback.

Without TCP_NODELAY a request whose headers and body leave in separate segments waits out the peer's delayed
ACK (about 40 ms a call on Linux)."""

from __future__ import annotations

import socket

import httpx

NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def nodelay_transport() -> httpx.HTTPTransport:
    """A sync transport with Nagle's algorithm off."""
    return httpx.HTTPTransport(socket_options=NODELAY)


def async_nodelay_transport() -> httpx.AsyncHTTPTransport:
    """An async transport with Nagle's algorithm off."""
    return httpx.AsyncHTTPTransport(socket_options=NODELAY)
