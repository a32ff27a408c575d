"""The egress proxy answers one request per connection: bytes written after the first request's body (a pipelined
or smuggled second request, with a Host of its own) never reach the address checked for the first.

Real sockets: the proxy on 127.0.0.1 and a destination on loopback that records every byte it receives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from service.upstream.egress import EgressProxy
from tests.security.egress_support import Recorder, basic

SMUGGLED = "GET /admin HTTP/1.1\r\nHost: admin.internal\r\n\r\nGET http://10.0.0.1/ HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok"


@dataclass
class RawDestination:
    """A TCP service that records each connection's bytes (until 0.3 s pass without one), then answers ANSWER."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = b""
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(65_536), 0.3)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
        self.received.append(data)
        writer.write(ANSWER)
        await writer.drain()
        await asyncio.sleep(0.2)  # keep-alive, as it says: the proxy must close the client's side itself
        writer.close()


@pytest.fixture
async def destination() -> AsyncIterator[RawDestination]:
    recorder = RawDestination()
    server = await asyncio.start_server(recorder._serve, "127.0.0.1", 0)
    recorder.port = server.sockets[0].getsockname()[1]
    try:
        yield recorder
    finally:
        server.close()
        await server.wait_closed()


async def exchange(destination: RawDestination, first_head: str, rest: str) -> bytes:
    """Write `first_head` (with the proxy's credentials) and `rest` in one go; the proxy's whole answer."""
    proxy = EgressProxy(["127.0.0.1"])
    try:
        env = await proxy.environment("fetch")
        port = await proxy.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = first_head.replace("\r\n\r\n", f"\r\nProxy-Authorization: {basic(env['HTTP_PROXY'])}\r\n\r\n", 1)
        writer.write((head + rest).encode("latin-1"))
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    finally:
        await proxy.aclose()
    return answer


async def test_a_pipelined_request_never_reaches_the_destination(destination: RawDestination) -> None:
    target = f"127.0.0.1:{destination.port}"
    answer = await exchange(destination, f"GET http://{target}/first HTTP/1.1\r\nHost: {target}\r\n\r\n", SMUGGLED)
    assert destination.received == [f"GET /first HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode()]
    # The client learns the connection carries no second request, and it is closed after the answer.
    assert answer == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        ("Content-Length: 5\r\n", "hello"),
        ("Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
        ("Transfer-Encoding: chunked\r\n", "5;note=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n"),
        ("", ""),  # no framing header: no body (RFC 9112 6.3), so what follows is a second request
    ],
)
async def test_a_body_is_relayed_to_its_end_and_no_further(
    destination: RawDestination, framing: str, body: str
) -> None:
    target = f"127.0.0.1:{destination.port}"
    answer = await exchange(destination, f"POST http://{target}/form HTTP/1.1\r\n{framing}\r\n", body + SMUGGLED)
    sent = f"POST /form HTTP/1.1\r\nHost: {target}\r\n{framing}Connection: close\r\n\r\n{body}"
    assert destination.received == [sent.encode()]
    assert answer.endswith(b"Connection: close\r\n\r\nok")


@pytest.mark.parametrize(
    ("framing", "reason"),
    [
        ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"both Content-Length and Transfer-Encoding"),
        ("Transfer-Encoding: gzip, chunked\r\n", b"only Transfer-Encoding: chunked is relayed"),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", b"only Transfer-Encoding: chunked"),
        ("Content-Length: 5\r\nContent-Length: 50\r\n", b"Content-Length is not one number"),
        ("Content-Length: +5\r\n", b"Content-Length is not one number"),
        ("Content-Length: 5, 5\r\n", b"Content-Length is not one number"),
    ],
)
async def test_a_body_framed_two_ways_is_refused(destination: RawDestination, framing: str, reason: bytes) -> None:
    target = f"127.0.0.1:{destination.port}"
    answer = await exchange(destination, f"POST http://{target}/ HTTP/1.1\r\n{framing}\r\n", "hello" + SMUGGLED)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert reason in answer
    assert destination.received == []


async def test_a_malformed_chunk_cuts_the_exchange(destination: RawDestination) -> None:
    target = f"127.0.0.1:{destination.port}"
    head = f"POST http://{target}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    await exchange(destination, head, "0x5\r\nhello\r\n0\r\n\r\n" + SMUGGLED)
    sent = f"POST / HTTP/1.1\r\nHost: {target}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    assert destination.received == [sent.encode()]


async def test_a_keep_alive_client_gets_each_answer(internal: Recorder) -> None:
    """httpx keeps connections: told `Connection: close`, it opens a new one per request."""
    proxy = EgressProxy(["127.0.0.1"])
    try:
        env = await proxy.environment("fetch")
        async with httpx.AsyncClient(proxy=env["HTTP_PROXY"], trust_env=False, timeout=20) as client:
            answers = [await client.get(f"http://127.0.0.1:{internal.port}/{n}") for n in range(3)]
    finally:
        await proxy.aclose()
    assert [(a.status_code, a.headers["connection"]) for a in answers] == [(200, "close")] * 3
    assert [path for path, _ in internal.hits] == ["/0", "/1", "/2"]
