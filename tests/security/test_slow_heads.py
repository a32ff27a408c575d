"""A connection whose request head does not come whole within HEAD_SECONDS is closed, by the uvicorn server of
`toolscout serve` and of the MCP front end (http_transport.listening_server). uvicorn waited for a head for ever: a
client without a key held a connection and a file descriptor per socket that said nothing, half a head, or one
header a second (measured on `toolscout serve`: all still open after 40 s). A real uvicorn server on 127.0.0.1,
raw sockets."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import uvicorn

from service.http_transport import HEAD_SECONDS, listening_server
from tests.processes import free_port

WHOLE = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
HALF = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


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
    port = free_port()
    config = uvicorn.Config(hello, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    listening = asyncio.Event()
    server = listening_server(config, listening.set)
    serving = asyncio.create_task(server.serve())
    try:
        await asyncio.wait_for(listening.wait(), 10)
        silent, half, trickled, kept_alive, whole = await asyncio.gather(
            held_for(port, b"", trickle=False),
            held_for(port, HALF, trickle=False),
            held_for(port, HALF, trickle=True),
            held_for(port, WHOLE, trickle=True, then=HALF),
            held_for(port, WHOLE, trickle=False),
        )
    finally:
        server.should_exit = True
        await serving
    for outcome, seconds in (silent, half, trickled, kept_alive):  # main: "open" after HEAD_SECONDS + 5
        assert outcome == "closed" and HEAD_SECONDS - 1 <= seconds <= HEAD_SECONDS + 2, (outcome, seconds)
    assert whole[0] == "answered" and whole[1] < 2
