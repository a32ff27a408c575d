"""The egress proxy: where the stdio servers that run behind it may connect (no internal address).

An upstream server hands a URL a caller gave it to its HTTP client, so a fetch-like tool reaches whatever this
machine reaches: 127.0.0.1's services, the private network, the cloud metadata address. The servers that run
behind this proxy (the demo `fetch` server, and servers-file entries with `"egress_proxy": true`) get
HTTP_PROXY / HTTPS_PROXY / ALL_PROXY pointing at it and an empty NO_PROXY, and Node's NODE_OPTIONS preload
(egress_preload.cjs) with NODE_USE_ENV_PROXY=1, since Node before 24 ignores the proxy variables. For each request
it resolves the host once, refuses it when an address is internal (urls.is_internal, unless
`execution.egress_allowed_hosts` lists the host or its network) and connects to exactly the address it checked,
so a DNS answer that changes after the check (rebinding) reaches no internal address. It speaks plain HTTP
forwarding (absolute-form requests, one per connection: egress_http.py) and CONNECT tunnels (HTTPS: TLS stays end
to end between the child and the destination).

Each server gets its own random credentials (Proxy-Authorization: Basic): another process of this machine cannot
use the proxy to reach what it would reach anyway, nor pass as a server. A refusal is a 403 with a short reason,
and logged; missing or wrong credentials are a 407. Connections without a head yet hold a budget of their own
(MAX_UNAUTHENTICATED, the oldest closed for a new one), those with credentials at most MAX_CONNECTIONS, at most
MAX_PER_SERVER of them one server's (the next gets a 503), and an exchange idle for IDLE_SECONDS ends."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import logging
import secrets
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from service.upstream import urls
from service.upstream.egress_http import (
    MAX_HEAD_BYTES,
    ProxyRefusal,
    Request,
    answer,
    copy,
    destination,
    parse_head,
    relay_answer,
    relay_body,
)

logger = logging.getLogger(__name__)

# An HTTP client sends its request head as soon as it connects; a connection silent this long gives up its slot.
HEAD_TIMEOUT_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 10.0
# Any local process may open connections to the proxy before it shows credentials. Those hold a budget of their
# own, MAX_UNAUTHENTICATED, in which a new connection closes the oldest one still without a head: silent ones
# cannot keep a server's connection from sending its head, nor use up the service's file descriptors (a process
# that opens connections without pause can still close a server's before its head is read: about 1 request in
# 2,000 during a flood of 500 connections a second, measured). Connections with valid credentials hold at most
# MAX_CONNECTIONS slots, at most MAX_PER_SERVER of them one server's.
MAX_UNAUTHENTICATED = 256
MAX_CONNECTIONS = 256
MAX_PER_SERVER = 64
# A tunnel or an answer with no byte either way for IDLE_SECONDS ends.
IDLE_SECONDS = 300.0
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
# Node before 24 ignores the proxy variables (fetch() and the http/https modules connect directly): every child
# behind the proxy preloads this script, which sends both through it; Node 24+ honours NODE_USE_ENV_PROXY=1.
NODE_PRELOAD = Path(__file__).with_name("egress_preload.cjs")


class EgressProxy:
    """An HTTP forward proxy and CONNECT tunnel on 127.0.0.1 that reaches public addresses only."""

    def __init__(
        self,
        allowed_hosts: Sequence[str] = (),
        max_connections: int = MAX_CONNECTIONS,
        idle_seconds: float = IDLE_SECONDS,
        head_seconds: float = HEAD_TIMEOUT_SECONDS,
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
        max_per_server: int = MAX_PER_SERVER,
    ) -> None:
        self._allowed_hosts = list(allowed_hosts)
        self._max_connections = max_connections
        self._max_unauthenticated = max_unauthenticated
        self._max_per_server = max_per_server
        self._idle_seconds = idle_seconds
        self._head_seconds = head_seconds
        self._users: dict[str, tuple[str, str]] = {}  # user name -> (server id, password)
        self._user_of: dict[str, str] = {}  # server id -> user name
        self._server: asyncio.Server | None = None
        self._lock = asyncio.Lock()
        self._handlers: set[asyncio.Task[None]] = set()
        self._waiting: dict[asyncio.Task[None], asyncio.StreamWriter] = {}  # no head yet, oldest first
        self._holding: dict[str, int] = {}  # server id -> its open connections

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

    async def environment(self, server_id: str, own: Mapping[str, str] | None = None) -> dict[str, str]:
        """The proxy variables of a child that runs behind the proxy (credentials of its own), and Node's: the
        preload goes before the NODE_OPTIONS of the child's own environment `own`."""
        port = await self.start()
        user = self._user_of.get(server_id)
        if user is None:
            user = self._user_of[server_id] = secrets.token_hex(8)
            self._users[user] = (server_id, secrets.token_urlsafe(24))
        url = f"http://{user}:{self._users[user][1]}@127.0.0.1:{port}"
        env = {name: url for name in PROXY_VARIABLES} | {name.lower(): url for name in PROXY_VARIABLES}
        node_options = f'--require "{NODE_PRELOAD}" {(own or {}).get("NODE_OPTIONS", "")}'.strip()
        return env | {"NO_PROXY": "", "no_proxy": "", "NODE_OPTIONS": node_options, "NODE_USE_ENV_PROXY": "1"}

    def secrets(self, server_id: str) -> list[str]:
        """The password of a server's proxy credentials (once `environment` made them): Toolscout's secret, which
        the child holds in its environment and a caller of its tools must never read back."""
        user = self._user_of.get(server_id)
        return [self._users[user][1]] if user is not None and user in self._users else []

    def forget(self, server_id: str) -> None:
        """A removed server's credentials stop working."""
        if (user := self._user_of.pop(server_id, None)) is not None:
            self._users.pop(user, None)

    # ------------------------------------------------------------------------------------ one connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._waiting) >= self._max_unauthenticated:
            # The oldest connection still without a head makes room: a client sends its head as it connects, so
            # only a silent one is old, and silent ones cannot keep a server's connection out.
            oldest = next(iter(self._waiting))
            self._waiting.pop(oldest).transport.abort()
        self._waiting[task] = writer
        self._handlers.add(task)
        try:
            await self._handle(reader, writer, task)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
            # The child went away or stalled (no head within head_seconds): there is no one to answer.
            logger.debug("egress proxy: connection ended without an answer (%s)", type(exc).__name__)
        except (ProxyRefusal, asyncio.LimitOverrunError) as exc:  # a malformed body, once forwarding began
            logger.info("egress proxy: exchange cut: %s", exc)
        except asyncio.CancelledError:
            # aclose ends the connections in flight. The handler task ends normally: Python 3.11's streams log a
            # cancelled one as an error ("Exception in callback").
            pass
        finally:
            self._waiting.pop(task, None)
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, task: asyncio.Task[None]
    ) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._head_seconds)
        except asyncio.LimitOverrunError:
            await answer(writer, 431, "request head too large")
            return
        finally:
            self._waiting.pop(task, None)
        try:
            parsed = parse_head(head)
            server_id = self._authenticate(parsed.headers)
            request = destination(parsed)
            self._take_slot(server_id)
        except ProxyRefusal as refusal:
            await answer(writer, refusal.status, refusal.reason)
            return
        try:
            await self._forward(reader, writer, server_id, request)
        finally:
            self._holding[server_id] -= 1

    def _take_slot(self, server_id: str) -> None:
        """One of the slots of connections with credentials; ProxyRefusal 503 when none is free."""
        if self._holding.get(server_id, 0) >= self._max_per_server:
            raise ProxyRefusal(503, f"too many connections of MCP server {server_id} to the egress proxy")
        if sum(self._holding.values()) >= self._max_connections:
            raise ProxyRefusal(503, "too many connections to the egress proxy")
        self._holding[server_id] = self._holding.get(server_id, 0) + 1

    async def _forward(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server_id: str, request: Request
    ) -> None:
        try:
            up_reader, up_writer = await self._open(server_id, request.host, request.port)
        except ProxyRefusal as refusal:
            await answer(writer, refusal.status, refusal.reason)
            return
        loop = asyncio.get_running_loop()
        last = [loop.time()]

        def touch() -> None:
            last[0] = loop.time()

        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                sending = copy(reader, up_writer, touch)
                receiving = copy(up_reader, writer, touch)
            else:
                up_writer.write(request.head)
                await up_writer.drain()
                sending = relay_body(reader, up_writer, request.body_length, touch)
                receiving = relay_answer(up_reader, writer, touch)
            await _both(sending, receiving, last, self._idle_seconds)
        finally:
            up_writer.close()

    def _authenticate(self, headers: list[tuple[str, str]]) -> str:
        """The server whose credentials the request carries; ProxyRefusal 407 without valid ones."""
        values = [value for name, value in headers if name.lower() == "proxy-authorization"]
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


async def _both(
    sending: Coroutine[Any, Any, None], receiving: Coroutine[Any, Any, None], last: list[float], idle_seconds: float
) -> None:
    """Run both directions until the destination's side ends (or sending fails), or no byte has passed either
    way for idle_seconds (last[0]: when one last did)."""
    loop = asyncio.get_running_loop()
    to_upstream = asyncio.create_task(sending)
    to_child = asyncio.create_task(receiving)
    try:
        # The destination closing ends the exchange; the child closing its sending side (a half-close), or the
        # end of the request's body, still lets the answer through.
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
    for task in (to_child, to_upstream):  # a malformed body, a vanished peer: the caller logs it
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error


__all__ = ["NODE_PRELOAD", "PROXY_VARIABLES", "EgressProxy", "ProxyRefusal"]
