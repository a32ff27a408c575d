"""An upstream's result of more content blocks than MAX_RESULT_BLOCKS is refused by the transport, before the MCP
SDK validates it: 300,000 one-character blocks (8 MB, under `execution.max_message_bytes`) held the event loop
3.9-5.1 s (the SDK's validation 2.9 s, our parse 0.5 s, the executor's conversion 0.5 s). Both transports, measured
with a probe of the loop's lag; a result of MAX_RESULT_BLOCKS blocks still arrives."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from service.upstream.result_bounds import MAX_RESULT_BLOCKS
from tests.processes import free_port, stop_process, wait_for_port
from tests.security.conftest import assert_problem, make_settings, running, servers_file
from tests.security.scripted_servers import scripted_entry

BLOCKS = 300_000
# `many` answers as many one-character text blocks as its argument `count` says.
MANY = """
def many(mid, msg):
    count = msg["params"]["arguments"]["count"]
    return {"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "a"}] * count}}
schema = {"type": "object", "properties": {"count": {"type": "integer"}}}
tools = [{"name": "many", "description": "Answers many small blocks.", "inputSchema": schema}]
"""
STDIO_SERVER = (
    MANY
    + """
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        send(many(mid, msg))
serve("many", handle)
"""
)
HTTP_SERVER = (
    "import json, sys\nfrom http.server import BaseHTTPRequestHandler, ThreadingHTTPServer\n"
    + MANY
    + """
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def answer(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_DELETE(self):
        self.answer(200)
    def do_GET(self):
        self.answer(405)
    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            return self.answer(202)
        if method == "initialize":
            answer = {"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "many", "version": "1"}}}
        elif method == "tools/list":
            answer = {"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}}
        elif method == "tools/call":
            answer = many(mid, msg)
        else:
            answer = {"jsonrpc": "2.0", "id": mid, "result": {}}
        self.answer(200, json.dumps(answer).encode())
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
)


@pytest.fixture
def http_port(tmp_path: Path) -> Iterator[int]:
    script = tmp_path / "many_http_server.py"
    script.write_text(HTTP_SERVER)
    port = free_port()
    process = subprocess.Popen([sys.executable, str(script), str(port)])
    try:
        wait_for_port(port, process, 20, "the HTTP server of many blocks")
        yield port
    finally:
        stop_process(process)


@asynccontextmanager
async def loop_lag() -> AsyncIterator[list[float]]:
    """The longest the event loop was held while the block ran (in the one-element list, once it is done)."""
    held = [0.0]
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            started = time.monotonic()
            await asyncio.sleep(0.002)
            held[0] = max(held[0], time.monotonic() - started - 0.002)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.01)
    try:
        yield held
    finally:
        done.set()
        await watcher


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_result_of_too_many_blocks_is_refused_without_holding_the_loop(
    tmp_path: Path, transport: str, request: pytest.FixtureRequest
) -> None:
    if transport == "stdio":
        entry = scripted_entry(tmp_path, "many", STDIO_SERVER)
    else:
        entry = {"url": f"http://127.0.0.1:{request.getfixturevalue('http_port')}/mcp"}
    execution = {"servers_file": servers_file(tmp_path, {"many": entry}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
        async with loop_lag() as held:
            answer = await http.post("/execute", json={"name": "many__many", "arguments": {"count": BLOCKS}})
        assert held[0] < 1.0, f"the event loop was held {held[0]:.2f} s"
        print(f"{transport}: refused, the loop was held {held[0] * 1000:.0f} ms")
        problem = assert_problem(answer, 502)
        assert f"more than {MAX_RESULT_BLOCKS} content blocks" in problem["detail"], problem
        assert "300,000 blocks" in problem["detail"], problem
        # A result at the limit arrives whole, the server still up; the loop is held a bounded time.
        async with loop_lag() as held:
            at_limit = await http.post(
                "/execute", json={"name": "many__many", "arguments": {"count": MAX_RESULT_BLOCKS}}
            )
        assert at_limit.status_code == 200, at_limit.text
        assert at_limit.json()["content"][0]["text"].startswith("a\na\na")  # the blocks of text, joined
        assert held[0] < 0.5, f"the event loop was held {held[0]:.2f} s"
        print(f"{transport}: at the limit the loop was held {held[0] * 1000:.0f} ms")
