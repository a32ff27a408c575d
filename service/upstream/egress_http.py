"""The egress proxy's HTTP/1.1 framing (RFC 9112): a request head read as exactly one request, its body relayed to
its exact end, the destination's answer marked `Connection: close`.

One request per client connection. The proxy checks the destination of the first request only, so it never
reads a byte past that request's body (Content-Length, or chunked to its last chunk): a second request written
on the same connection (pipelined, or smuggled inside a body the destination would frame otherwise) never reaches
the checked address with a Host of its own. A head whose framing two parties could read differently
(Content-Length beside Transfer-Encoding, two different lengths, a coding other than chunked) is refused."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 32_768
# Hop-by-hop headers of the client's request that are not passed on (RFC 9110 7.6.1 and the proxy's own).
_HOP_HEADERS = {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "te", "upgrade"}
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")
_LENGTH = re.compile(r"[0-9]{1,18}")


class ProxyRefusal(Exception):
    """A request the proxy answers itself (status and reason) instead of forwarding."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Head:
    """A request head as the client wrote it (checked for ambiguity, nothing decided yet)."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]  # (name, value) as written, value stripped

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name]


@dataclass(frozen=True)
class Request:
    method: str
    host: str
    port: int
    head: bytes  # what to send the destination (empty for CONNECT)
    body_length: int | None = 0  # bytes of body after the head; None: chunked


def parse_head(head: bytes) -> Head:
    """The head's parts; ProxyRefusal 400 for one that is malformed or ambiguous."""
    try:
        request_line, *header_lines = head.decode("latin-1")[:-4].split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError as exc:
        raise ProxyRefusal(400, "malformed request line") from exc
    if any(line[:1] in (" ", "\t") or ":" not in line for line in header_lines):
        raise ProxyRefusal(400, "malformed header line (folded, or without a colon)")
    pairs = [line.split(":", 1) for line in header_lines]
    if any(name != name.strip() for name, _ in pairs):
        raise ProxyRefusal(400, "malformed header line (whitespace around the name)")
    parsed = Head(method, target, version, [(name, value.strip()) for name, value in pairs])
    if len(parsed.values("host")) > 1:
        raise ProxyRefusal(400, "more than one Host header")
    return parsed


def body_length(head: Head) -> int | None:
    """How long the request's body is (0 without one); None for a chunked body."""
    lengths = set(head.values("content-length"))
    codings = [c.strip().lower() for value in head.values("transfer-encoding") for c in value.split(",")]
    if codings and lengths:
        raise ProxyRefusal(400, "both Content-Length and Transfer-Encoding")
    if codings:
        if codings != ["chunked"]:
            raise ProxyRefusal(400, "only Transfer-Encoding: chunked is relayed")
        return None
    if len(lengths) > 1 or not all(_LENGTH.fullmatch(length) for length in lengths):
        raise ProxyRefusal(400, "Content-Length is not one number")
    return int(lengths.pop()) if lengths else 0


def destination(head: Head) -> Request:
    """Where the request goes and what the destination is sent; ProxyRefusal for one not to forward."""
    if head.method == "CONNECT":
        host, port = host_port(head.target)
        return Request(head.method, host, port, b"")
    parts = urlsplit(head.target)
    if parts.scheme != "http" or not parts.netloc or "@" in parts.netloc:
        raise ProxyRefusal(400, "only http:// URLs in absolute form, or CONNECT for https")
    authority = parts.netloc
    if authority.count(":") > 1 and not authority.startswith("["):
        # httpx writes an IPv6 host without its brackets here; its Host header has them.
        authority = next(iter(head.values("host")), "")
    host, port = host_port(authority, default_port=80)
    length = body_length(head)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    # RFC 9112 3.2.2: the request target names the destination and the Host sent on is rebuilt from it, so a
    # name in egress_allowed_hosts cannot carry a Host of another site served at the same address.
    shown = f"[{host}]" if ":" in host else host
    kept = [f"{name}: {value}" for name, value in head.headers if name.lower() not in _HOP_HEADERS | {"host"}]
    host_line = f"Host: {shown}" if port == 80 else f"Host: {shown}:{port}"
    lines = [f"{head.method} {path} {head.version}", host_line, *kept, "Connection: close", "", ""]
    return Request(head.method, host, port, "\r\n".join(lines).encode("latin-1"), length)


def host_port(authority: str, default_port: int | None = None) -> tuple[str, int]:
    """`host:port` or `[v6]:port` (the port may be left out when there is a default)."""
    host, separator, port = authority.rpartition(":")
    if not separator or host.startswith("[") and not host.endswith("]") or authority.endswith("]"):
        host, port = authority, str(default_port or "")
    if not port.isdigit() or not host.strip("[]") or not 0 < int(port) < 65536:
        raise ProxyRefusal(400, "the destination must be host:port")
    return host.strip("[]").lower(), int(port)


async def answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    """The proxy's own answer (a refusal), after which the connection closes."""
    body = f"{reason}\n".encode()
    extra = 'Proxy-Authenticate: Basic realm="toolscout-egress"\r\n' if status == 407 else ""
    writer.write(
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, touch: Callable[[], None]) -> None:
    """Every byte of source to sink, then an end of file (a tunnel)."""
    while chunk := await source.read(65_536):
        touch()
        sink.write(chunk)
        await sink.drain()
    with contextlib.suppress(OSError):
        sink.write_eof()


async def relay_body(
    reader: asyncio.StreamReader, sink: asyncio.StreamWriter, length: int | None, touch: Callable[[], None]
) -> None:
    """The request's body and not one byte more: `length` bytes, or chunks up to the last one and its trailer."""
    if length is not None:
        await _relay_exactly(reader, sink, length, touch)
        return
    while True:
        line = await reader.readuntil(b"\r\n")
        size = line[:-2].split(b";", 1)[0]
        if not _CHUNK_SIZE.fullmatch(size):
            raise ProxyRefusal(400, "malformed chunk size")
        sink.write(line)
        if int(size, 16) == 0:
            break
        await _relay_exactly(reader, sink, int(size, 16), touch)
        if await reader.readexactly(2) != b"\r\n":
            raise ProxyRefusal(400, "a chunk does not end with CRLF")
        sink.write(b"\r\n")
    while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":  # trailer fields, then the empty line
        sink.write(trailer)
    sink.write(b"\r\n")
    await sink.drain()


async def _relay_exactly(
    reader: asyncio.StreamReader, sink: asyncio.StreamWriter, count: int, touch: Callable[[], None]
) -> None:
    while count > 0:
        chunk = await reader.read(min(count, 65_536))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", count)
        touch()
        count -= len(chunk)
        sink.write(chunk)
        await sink.drain()


async def relay_answer(
    up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, touch: Callable[[], None]
) -> None:
    """The destination's answer, its final head saying `Connection: close` (this connection carries no second
    request), then the rest of its bytes until the destination closes."""
    while True:
        try:
            head = await up_reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await answer(writer, 502, "the destination's answer head is too large")
            return
        except asyncio.IncompleteReadError as exc:  # no head at all: pass on what came
            writer.write(exc.partial)
            await writer.drain()
            return
        touch()
        status_line, _, fields = head[:-4].partition(b"\r\n")
        code = status_line.split(b" ", 2)[1:2]
        if code and code[0].startswith(b"1") and code[0] != b"101":  # 100 Continue, 103 Early Hints: more follows
            writer.write(head)
            continue
        kept = [
            line
            for line in fields.split(b"\r\n")
            if line and line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")
        ]
        writer.write(b"\r\n".join([status_line, *kept, b"Connection: close", b"", b""]))
        await writer.drain()
        break
    await copy(up_reader, writer, touch)


__all__ = [
    "MAX_HEAD_BYTES",
    "Head",
    "ProxyRefusal",
    "Request",
    "answer",
    "body_length",
    "copy",
    "destination",
    "host_port",
    "parse_head",
    "relay_answer",
    "relay_body",
]
