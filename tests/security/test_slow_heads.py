"""Slow requests. A connection whose request head does not come whole within HEAD_SECONDS is closed, by the uvicorn
server of `toolscout serve` and of the MCP front end (http_transport.listening_server): uvicorn waited for a head for
ever, and a client without a key held a connection and a file descriptor per socket that said nothing, half a head,
or one header a second (measured on `toolscout serve`: all still open after 40 s); a real uvicorn server on
127.0.0.1, raw sockets. A body that does not come in time is a 408 (service/security/limits.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn

from service.http_transport import HEAD_SECONDS, listening_server
from service.security.limits import BODY_GRACE_SECONDS
from tests.processes import free_port
from tests.security.conftest import assert_problem, bearer, cli_key, make_settings, running

WHOLE = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
HALF = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def hello_server() -> AsyncIterator[int]:
    """`hello` served by http_transport.listening_server (as `toolscout serve` is) on a free port: the port."""
    port = free_port()
    config = uvicorn.Config(hello, host="127.0.0.1", port=port, log_level="critical", lifespan="off")
    listening = asyncio.Event()
    running = listening_server(config, listening.set)
    task = asyncio.create_task(running.serve())
    try:
        await asyncio.wait_for(listening.wait(), 10)
        yield port
    finally:
        running.should_exit = True
        await task


async def held_for(port: int, first: bytes, trickle: bool, then: bytes = b"") -> tuple[str, float]:
    """What the server did with a connection that sends `first` (then, after its answer, `then`) and, with `trickle`,
    one more header a second: ("closed" | "answered" | "open", seconds)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(first)
    try:
        while time.monotonic() - started < HEAD_SECONDS + 5:
            try:
                data = await asyncio.wait_for(reader.read(200), 1.0)
            except TimeoutError:
                if trickle:
                    writer.write(b"X-Slow: 1\r\n")
                continue
            if not data:
                return "closed", time.monotonic() - started
            if not then:
                return "answered", time.monotonic() - started
            writer.write(then)  # the next request on the kept-alive connection
            started, then = time.monotonic(), b""
        return "open", time.monotonic() - started
    finally:
        writer.close()


async def test_a_connection_without_a_whole_head_in_time_is_closed() -> None:
    async with hello_server() as port:
        silent, half, trickled, kept_alive, whole = await asyncio.gather(
            held_for(port, b"", trickle=False),
            held_for(port, HALF, trickle=False),
            held_for(port, HALF, trickle=True),
            held_for(port, WHOLE, trickle=True, then=HALF),
            held_for(port, WHOLE, trickle=False),
        )
    for outcome, seconds in (silent, half, trickled, kept_alive):  # main: "open" after HEAD_SECONDS + 5
        assert outcome == "closed" and HEAD_SECONDS - 1 <= seconds <= HEAD_SECONDS + 2, (outcome, seconds)
    assert whole[0] == "answered" and whole[1] < 2


async def test_a_body_that_does_not_come_in_time_is_a_408_and_without_a_key_a_401_unread(tmp_path: Path) -> None:
    """FastAPI reads a body before it resolves the caller: a client without a key trickled one to /execute a byte a
    second and held the request as long as it liked. Now the key is checked before the body is read
    (test_key_before_body.py): without one the answer is a 401 at once; with one, the body comes whole within
    BODY_GRACE_SECONDS plus a second for each BODY_MIN_BYTES_PER_SECOND, else 408 problem+json (and the connection
    closes)."""

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"name": "x", '
        for _ in range(int(BODY_GRACE_SECONDS) + 20):  # main: read to the end, then a 401, 30 s later
            await asyncio.sleep(1)
            yield b" "
        yield b'"arguments": {}}'

    async with running(make_settings(tmp_path)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])  # keys exist: every request needs one
        headers = {"Content-Type": "application/json"}
        started = time.monotonic()
        keyless = await http.post("/execute", content=trickle(), headers=headers)
        keyless_waited = time.monotonic() - started
        started = time.monotonic()
        slow = await http.post("/execute", content=trickle(), headers={**headers, **bearer(admin)})
        waited = time.monotonic() - started
        fast = await http.post("/execute", json={"name": "x", "arguments": {}})
    assert_problem(keyless, 401, "unauthorized")
    assert keyless_waited < 2, keyless_waited  # before: 408 after the grace (10 s), the body read meanwhile
    body = assert_problem(slow, 408, "request-timeout")
    assert body["instance"] == "/execute" and slow.headers["connection"] == "close"
    assert BODY_GRACE_SECONDS - 1 <= waited <= BODY_GRACE_SECONDS + 3, waited
    assert_problem(fast, 401, "unauthorized")
