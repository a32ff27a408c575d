"""The egress proxy: where the stdio servers that run behind it may connect (no internal address).

An upstream server hands a URL a caller gave it to its HTTP client, so a fetch-like tool reaches whatever this
machine reaches: 127.0.0.1's services, the private network, the cloud metadata address. The servers that run
behind this proxy (the demo `fetch` server, and servers-file entries with `"egress_proxy": true`) get
HTTP_PROXY / HTTPS_PROXY / ALL_PROXY pointing at it and an empty NO_PROXY. For each request it resolves the host
once, refuses it when an address is internal (urls.is_internal, unless `execution.egress_allowed_hosts` lists
the host or its network) and connects to exactly the address it checked, so a DNS answer that changes after the
check (rebinding) reaches no internal address. It speaks plain HTTP forwarding (absolute-form requests, one per
connection) and CONNECT tunnels (HTTPS: TLS stays end to end between the child and the destination).

Each server gets its own random credentials (Proxy-Authorization: Basic): another process of this machine cannot
use the proxy to reach what it would reach anyway, nor pass as a server. A refusal is a 403 with a short reason,
and logged; missing or wrong credentials are a 407. The Host sent on is rebuilt from the request target, at most
MAX_CONNECTIONS connections are open at once and a tunnel idle for IDLE_SECONDS ends."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit

from service.upstream import urls

logger = logging.getLogger(__name__)

MAX_HEAD_BYTES = 32_768
# An HTTP client sends its request head as soon as it connects; a connection silent this long gives up its slot.
HEAD_TIMEOUT_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 10.0
# Any local process may open connections to the proxy before it shows credentials: without a bound, thousands of
# silent ones would use up the service's file descriptors. A tunnel with no byte either way for IDLE_SECONDS ends.
MAX_CONNECTIONS = 256
IDLE_SECONDS = 300.0
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
# Hop-by-hop headers of the client's request that are not passed on (RFC 9110 7.6.1 and the proxy's own).
_HOP_HEADERS = {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "te", "upgrade"}


class ProxyRefusal(Exception):
    """A request the proxy answers itself (status and reason) instead of forwarding."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class _Request:
    method: str
    host: str
    port: int
    head: bytes  # what to send the destination (empty for CONNECT)


class EgressProxy:
    """An HTTP forward proxy and CONNECT tunnel on 127.0.0.1 that reaches public addresses only."""

    def __init__(
        self,
        allowed_hosts: Sequence[str] = (),
        max_connections: int = MAX_CONNECTIONS,
        idle_seconds: float = IDLE_SECONDS,
        head_seconds: float = HEAD_TIMEOUT_SECONDS,
    ) -> None:
        self._allowed_hosts = list(allowed_hosts)
        self._max_connections = max_connections
        self._idle_seconds = idle_seconds
        self._head_seconds = head_seconds
        self._users: dict[str, tuple[str, str]] = {}  # user name -> (server id, password)
        self._user_of: dict[str, str] = {}  # server id -> user name
        self._server: asyncio.Server | None = None
        self._lock = asyncio.Lock()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int | None:
        return self._server.sockets[0].getsockname()[1] if self._server is not None else None

    async def start(self) -> int:
        """Listen on a random port of 127.0.0.1 (once); the port."""
        async with self._lock:
            if self._server is None:
                self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=MAX_HEAD_BYTES)
                logger.info("egress proxy listening on 127.0.0.1:%s", self.port)
        assert self.port is not None
        return self.port

    async def aclose(self) -> None:
        """Stop listening and end the connections in flight."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def environment(self, server_id: str) -> dict[str, str]:
        """The proxy variables of a child that runs behind the proxy (credentials of its own)."""
        port = await self.start()
        user = self._user_of.get(server_id)
        if user is None:
            user = self._user_of[server_id] = secrets.token_hex(8)
            self._users[user] = (server_id, secrets.token_urlsafe(24))
        url = f"http://{user}:{self._users[user][1]}@127.0.0.1:{port}"
        env = {name: url for name in PROXY_VARIABLES} | {name.lower(): url for name in PROXY_VARIABLES}
        return env | {"NO_PROXY": "", "no_proxy": ""}

    def forget(self, server_id: str) -> None:
        """A removed server's credentials stop working."""
        if (user := self._user_of.pop(server_id, None)) is not None:
            self._users.pop(user, None)

    # ------------------------------------------------------------------------------------ one connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._handlers) >= self._max_connections:
            with contextlib.suppress(ConnectionError):
                await _answer(writer, 503, "too many connections to the egress proxy")
            writer.close()
            return
        self._handlers.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
            # The child went away or stalled (no head within head_seconds): there is no one to answer.
            logger.debug("egress proxy: connection ended without an answer (%s)", type(exc).__name__)
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._head_seconds)
        except asyncio.LimitOverrunError:
            await _answer(writer, 431, "request head too large")
            return
        try:
            server_id, request = self._parse(head)
            upstream = await self._open(server_id, request.host, request.port)
        except ProxyRefusal as refusal:
            await _answer(writer, refusal.status, refusal.reason)
            return
        up_reader, up_writer = upstream
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.head)
            await writer.drain()
            await _pipe_both(reader, writer, up_reader, up_writer, self._idle_seconds)
        finally:
            up_writer.close()

    def _parse(self, head: bytes) -> tuple[str, _Request]:
        """The server a request comes from and where it goes; ProxyRefusal for one not to forward."""
        try:
            text = head.decode("latin-1")
            request_line, *header_lines = text[:-4].split("\r\n")
            method, target, version = request_line.split(" ")
        except ValueError as exc:
            raise ProxyRefusal(400, "malformed request line") from exc
        if any(line[:1] in (" ", "\t") or ":" not in line for line in header_lines):
            raise ProxyRefusal(400, "malformed header line (folded, or without a colon)")
        headers = [line.split(":", 1) for line in header_lines]
        if any(name != name.strip() for name, _ in headers):
            raise ProxyRefusal(400, "malformed header line (whitespace around the name)")
        hosts = [value.strip() for name, value in headers if name.lower() == "host"]
        if len(hosts) > 1:
            raise ProxyRefusal(400, "more than one Host header")
        server_id = self._authenticate(headers)
        if method == "CONNECT":
            host, port = _host_port(target)
            return server_id, _Request(method, host, port, b"")
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.netloc or "@" in parts.netloc:
            raise ProxyRefusal(400, "only http:// URLs in absolute form, or CONNECT for https")
        authority = parts.netloc
        if authority.count(":") > 1 and not authority.startswith("["):
            # httpx writes an IPv6 host without its brackets here; its Host header has them.
            authority = hosts[0] if hosts else ""
        host, port = _host_port(authority, default_port=80)
        path = parts.path or "/"
        if parts.query:
            path = f"{path}?{parts.query}"
        # RFC 9112 3.2.2: the request target names the destination and the Host sent on is rebuilt from it, so a
        # name in egress_allowed_hosts cannot carry a Host of another site served at the same address.
        shown = f"[{host}]" if ":" in host else host
        kept = [f"{name}:{value}" for name, value in headers if name.lower() not in _HOP_HEADERS | {"host"}]
        # One request per connection: a second one on it could not be checked for its own host.
        host_line = f"Host: {shown}" if port == 80 else f"Host: {shown}:{port}"
        lines = [f"{method} {path} {version}", host_line, *kept, "Connection: close", "", ""]
        return server_id, _Request(method, host, port, "\r\n".join(lines).encode("latin-1"))

    def _authenticate(self, headers: list[list[str]]) -> str:
        """The server whose credentials the request carries; ProxyRefusal 407 without valid ones."""
        values = [value.strip() for name, value in headers if name.strip().lower() == "proxy-authorization"]
        scheme, _, token = (values[0] if values else "").partition(" ")
        try:
            user, _, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user, password = "", ""
        server_id, expected = self._users.get(user, ("", "")) if scheme.lower() == "basic" else ("", "")
        if not expected or not hmac.compare_digest(password.encode(), expected.encode()):
            raise ProxyRefusal(407, "proxy credentials missing or wrong")
        return server_id

    async def _open(self, server_id: str, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to a checked address of host: resolved once, and that very address is connected to."""
        try:
            addresses = await urls.resolve(host, port)
        except OSError as exc:
            raise ProxyRefusal(502, f"host {host!r} does not resolve") from exc
        if reason := urls.refusal(host, addresses, self._allowed_hosts):
            logger.warning("egress proxy: MCP server %s may not reach %s:%s: %s", server_id, host, port, reason)
            raise ProxyRefusal(403, f"refused: {reason} (allow it with execution.egress_allowed_hosts)")
        failure: OSError | TimeoutError = OSError(f"host {host!r} resolves to no address")
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(str(address), port), CONNECT_TIMEOUT_SECONDS)
            except (OSError, TimeoutError) as exc:  # refused or unreachable: the next address may answer
                failure = exc
        raise ProxyRefusal(502, f"cannot connect to {host}:{port}: {failure}")


def _host_port(authority: str, default_port: int | None = None) -> tuple[str, int]:
    """`host:port` or `[v6]:port` (the port may be left out when there is a default)."""
    host, separator, port = authority.rpartition(":")
    if not separator or host.startswith("[") and not host.endswith("]") or authority.endswith("]"):
        host, port = authority, str(default_port or "")
    if not port.isdigit() or not host.strip("[]") or not 0 < int(port) < 65536:
        raise ProxyRefusal(400, "the destination must be host:port")
    return host.strip("[]").lower(), int(port)


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = f"{reason}\n".encode()
    extra = 'Proxy-Authenticate: Basic realm="toolscout-egress"\r\n' if status == 407 else ""
    writer.write(
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    idle_seconds: float,
) -> None:
    """Copy bytes both ways until the exchange ends, or no byte has passed either way for idle_seconds."""
    loop = asyncio.get_running_loop()
    last = [loop.time()]

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while chunk := await source.read(65_536):
            last[0] = loop.time()
            sink.write(chunk)
            await sink.drain()
        with contextlib.suppress(OSError):
            sink.write_eof()

    to_upstream = asyncio.create_task(copy(reader, up_writer))
    to_child = asyncio.create_task(copy(up_reader, writer))
    try:
        # The destination closing ends the exchange; the child closing its sending side (a half-close) still
        # lets the answer through.
        pending = {to_upstream, to_child}
        while pending and loop.time() - last[0] < idle_seconds:
            wait = idle_seconds - (loop.time() - last[0])
            done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if to_child in done or to_upstream in done and to_upstream.exception() is not None:
                break
    finally:
        for task in (to_upstream, to_child):
            task.cancel()
        await asyncio.gather(to_upstream, to_child, return_exceptions=True)


__all__ = ["PROXY_VARIABLES", "EgressProxy", "ProxyRefusal"]
