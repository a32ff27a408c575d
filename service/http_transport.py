"""HTTP over loopback: httpx transports for calling a Toolscout API, and the uvicorn server of `serve` and of the MCP
front end's HTTP transport, which says where it listens once its socket accepts connections and closes a connection
whose request head does not come in time or is too long.

Without TCP_NODELAY a request whose headers and body leave in separate segments waits out the peer's delayed
ACK (about 40 ms a call on Linux)."""

from __future__ import annotations

import asyncio
import errno
import json
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    import uvicorn

NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
# A request's head (request line and headers) arrives within this, from the connection or from its first byte.
HEAD_SECONDS = 10.0
# ... and is at most this long (nginx's default takes 32 KB): uvicorn's httptools protocol keeps every header of a
# head with no bound, and one keyless connection of 60 MB of `a: b` headers took the service from 564 MiB to 1.9 GB.
HEAD_MAX_BYTES = 64 * 1024
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/problem+json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
)
BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\nx-content-type-options: nosniff\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
)
URI_TOO_LONG = (
    b"HTTP/1.1 414 URI Too Long\r\ncontent-type: application/problem+json\r\nx-content-type-options: nosniff\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
)
URL_MAX_BYTES = 65_535  # httptools' URL parser holds offsets of 16 bits: a longer path and query is no URL to it


class HeadTooLarge(Exception):
    """Raised by the protocol when a head that ended inside one read is longer than HEAD_MAX_BYTES."""


class _NamedErrors:
    """The protocol's parser, keeping the reason of the last request it refused (`Duplicate Content-Length`):
    uvicorn answers every one with a text/plain `Invalid HTTP request received.`"""

    def __init__(self, parser: object) -> None:
        self.parser, self.reason, self.url_too_long, self.head_too_large = parser, "", False, False

    def feed_data(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)  # type: ignore[attr-defined]
        except Exception as exc:
            # A protocol callback's own error is the reason: llhttp says only `User callback error` of it.
            from httptools import HttpParserInvalidURLError  # here: the import is for this error only

            cause = exc.__cause__ or exc.__context__ or exc
            self.reason = str(cause)[:200]
            self.url_too_long = isinstance(cause, HttpParserInvalidURLError) and "too long" in str(cause)
            self.head_too_large = isinstance(cause, HeadTooLarge)
            raise

    def __getattr__(self, name: str) -> object:
        return getattr(self.parser, name)


def bound_socket(host: str, port: int) -> socket.socket:
    """A server's socket, bound (not yet listening) before its start-up: a port another process holds used to be
    found after the migrations, the model load and the demo servers' start, seconds later (`toolscout serve`), or
    was uvicorn's log line of an errno (`toolscout mcp --transport http`)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a restart reuses the port
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    # Not inheritable (uvicorn's own binding makes it so, for workers it forks): the upstream servers started later
    # would each hold the API's listening socket, able to accept its connections, keys and all.
    return sock


def listen_hint(exc: OSError, server: str, host_variable: str, port_variable: str) -> str:
    """What to change when `bound_socket` failed: a port in use and a host that is no address of this machine
    were both "is another `toolscout serve` running?"."""
    if exc.errno == errno.EADDRINUSE:
        return f"is another {server} running? --port or {port_variable} chooses another port"
    if exc.errno == errno.EACCES:
        return f"a port below 1024 needs privileges: --port or {port_variable} chooses another port"
    return f"--host or {host_variable} chooses the address to listen on (127.0.0.1: this machine only)"


def nodelay_transport() -> httpx.HTTPTransport:
    """A sync transport with Nagle's algorithm off."""
    return httpx.HTTPTransport(socket_options=NODELAY)


def async_nodelay_transport() -> httpx.AsyncHTTPTransport:
    """An async transport with Nagle's algorithm off."""
    return httpx.AsyncHTTPTransport(socket_options=NODELAY)


def head_timeout_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (httptools), closing a connection whose request head is not whole HEAD_SECONDS
    after the connection opened or after the request's first byte. uvicorn waits for a head for ever: measured on
    `toolscout serve`, a connection that sent half a head, or a header a second, was still open after 40 s, so a
    client without a key held one file descriptor and connection per socket it opened, as many as it liked (nginx
    gives up after 60 s, client_header_timeout). A head past HEAD_MAX_BYTES gets a 431 problem and the connection
    closes: what is parsed of it is bounded by that and the one read (at most 256 KiB) that crossed it, and a head
    that ended within one read is measured at its end."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeadTimeoutProtocol(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None
        _in_head = False
        _head_bytes = 0
        _refused = False

        def send_400_response(self, msg: str) -> None:
            """A request llhttp refuses (two Content-Length headers, one with Transfer-Encoding, a space before a
            header's colon: what smuggling through a proxy is made of) gets a problem naming why, then the
            connection closes, as uvicorn's own text/plain answer did."""
            reason = getattr(self.parser, "reason", "") or msg
            if getattr(self.parser, "url_too_long", False):  # was a 400 saying only `User callback error`
                detail = f"A request's URL (path and query) holds at most {URL_MAX_BYTES} bytes: {reason}"
                self._refuse(URI_TOO_LONG, "uri-too-long", 414, "URI too long", detail)
                return
            if getattr(self.parser, "head_too_large", False):
                self._refuse_head()
                return
            self._refuse(BAD_REQUEST, "bad-request", 400, "Bad request", f"The request is not valid HTTP/1.1: {reason}")

        def _refuse(self, head: bytes, slug: str, status: int, title: str, detail: str) -> None:
            """Answer a problem before any app sees the request, then close the connection."""
            body = json.dumps(
                {"type": f"https://toolscout.dev/problems/{slug}", "status": status, "title": title, "detail": detail}
            ).encode()
            self.transport.write(head % (len(body), body))
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            counted = self._in_head  # a head that began inside this read is counted from the next one
            super().data_received(data)
            if not (self._in_head and counted):
                return
            self._head_bytes += len(data)
            if self._head_bytes > HEAD_MAX_BYTES and not self.transport.is_closing():
                self._refused = True
                self._head_received()
                self._refuse_head()

        def _refuse_head(self) -> None:
            detail = f"A request head (request line and headers) holds at most {HEAD_MAX_BYTES} bytes"
            self._refuse(TOO_LARGE, "request-header-fields-too-large", 431, "Request head too large", detail)

        def _await_head(self) -> None:
            self._head_received()
            self._in_head, self._head_bytes = True, 0
            self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_too_slow)

        def _head_received(self) -> None:
            self._in_head = False
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.parser = _NamedErrors(self.parser)  # type: ignore[assignment]
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_received()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._await_head()

        def on_headers_complete(self) -> None:
            self._head_received()
            # A head that ended inside the read that began it, or crossed the bound, was never counted by
            # data_received (a read holds up to 256 KiB): its parts are measured here, a few additions a header.
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > HEAD_MAX_BYTES and len(self.url) <= URL_MAX_BYTES:  # a longer URL is the parser's 414
                raise HeadTooLarge(f"{size} bytes")
            super().on_headers_complete()

    return HeadTimeoutProtocol


def listening_server(
    config: uvicorn.Config, on_listening: Callable[[], None], on_stopping: Callable[[], None] | None = None
) -> uvicorn.Server:
    """A uvicorn server calling `on_listening` once, after a start-up that succeeded: not before the model load
    and warm-up (seconds), when a URL printed first would be refused; and `on_stopping` when it begins to stop,
    before it waits for the open connections to close (a stream that never ends would keep it waiting). Its
    connections are HeadTimeoutProtocol's."""
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

    config.http = head_timeout_protocol()
    return ListeningServer(config)
