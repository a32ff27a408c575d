"""What an upstream server sends is bounded: one JSON-RPC message over `execution.max_message_bytes` fails the call
it answers (or the connection that lists tools) with a problem naming the limit, the connection is recycled, and
the gateway never holds the message."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.execution.runtime import get_gateway
from tests.processes import free_port, stop_process, wait_for_port
from tests.security.conftest import assert_problem, make_settings, probe_entry, running, servers_file
from tests.security.scripted_servers import scripted_entry
from tests.upstream.upstream_support import HttpServer

# A hand-written stdio server: `huge` answers one message of HUGE_MB megabytes on one line, written a megabyte at
# a time (the server itself never holds it); with `biglist` its tools/list is that message.
RAW_SERVER = """
mode, mb = sys.argv[1], int(sys.argv[2])
out = sys.stdout

def huge(msg_id, result):
    before, after = json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}).split("@@")
    out.write(before)
    for _ in range(mb):
        out.write("x" * 1_000_000)
    out.write(after + "\\n"); out.flush()

schema = {"type": "object", "properties": {"text": {"type": "string"}}}
tools = [{"name": "huge", "description": "Answers one enormous message.", "inputSchema": schema},
         {"name": "echo", "description": "Echo the text back.", "inputSchema": schema}]
def handle(method, mid, msg):
    if method == "tools/list" and mode == "biglist":
        huge(mid, {"tools": [{"name": "t", "description": "@@", "inputSchema": {"type": "object"}}]})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call" and msg["params"]["name"] == "huge":
        huge(mid, {"content": [{"type": "text", "text": "@@"}]})
    elif method == "tools/call":
        text = msg["params"]["arguments"].get("text", "")
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
serve("raw", handle)
"""
LIMIT = 4_000_000
HUGE_MB = 40


def raw_entry(tmp_path: Path, mode: str) -> dict[str, Any]:
    return scripted_entry(tmp_path, "raw", RAW_SERVER, mode, str(HUGE_MB))


async def test_an_oversized_result_fails_its_call_in_bounded_memory_and_the_server_is_recycled(
    tmp_path: Path,
) -> None:
    servers = {"raw": raw_entry(tmp_path, "call"), "probe": probe_entry()}
    execution = {
        "servers_file": servers_file(tmp_path, servers),
        "startup_wait_seconds": 60,
        "max_message_bytes": LIMIT,
    }
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        pool = get_gateway(app.state.resources).pool
        pid = pool.get("raw").health.pid
        started = time.perf_counter()
        tracemalloc.start()
        try:
            answer = await http.post("/execute", json={"name": "raw__huge", "arguments": {}})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        elapsed = time.perf_counter() - started
        problem = assert_problem(answer, 502)
        assert "4000000 bytes" in problem["detail"] and "being restarted" in problem["detail"], problem
        # Before: the 40 MB line was buffered, parsed, tokenized and stored (about 50 bytes of memory per byte of it).
        assert peak < 16 * 2**20, peak // 2**20
        assert elapsed < 10, elapsed
        # The other server never noticed; this one is back with a new process and answers.
        other = await http.post("/execute", json={"name": "probe__echo", "arguments": {"text": "a"}})
        assert other.status_code == 200, other.text
        echo = await http.post("/execute", json={"name": "raw__echo", "arguments": {"text": "still here"}})
        assert echo.status_code == 200, echo.text
        assert echo.json()["content"] == [{"type": "text", "text": "still here"}]
        assert pool.get("raw").health.restarts == 1 and pool.get("raw").health.pid != pid


async def test_an_oversized_tool_list_leaves_the_server_in_backoff_with_the_reason(tmp_path: Path) -> None:
    servers = {"raw": raw_entry(tmp_path, "biglist"), "probe": probe_entry()}
    execution = {
        "servers_file": servers_file(tmp_path, servers),
        "startup_wait_seconds": 60,
        "max_message_bytes": LIMIT,
    }
    started = time.perf_counter()
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
        assert time.perf_counter() - started < 20
        view = (await http.get("/servers/raw")).json()
        assert view["state"] == "backoff" and view["tools"] == 0, view
        assert "more than 4000000 bytes" in view["health"]["last_error"], view["health"]
        assert (
            await http.post("/execute", json={"name": "probe__echo", "arguments": {"text": "a"}})
        ).status_code == 200


# A hand-written streamable HTTP server answering JSON bodies: `huge` answers HUGE_MB megabytes, `bomb` a gzip body
# of a few KB that inflates to HUGE_MB megabytes (the client asked for identity).
RAW_HTTP_SERVER = """
import gzip, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, mb = int(sys.argv[1]), int(sys.argv[2])
schema = {"type": "object", "properties": {"text": {"type": "string"}}}
tools = [{"name": n, "description": "A tool of the raw HTTP server.", "inputSchema": schema}
         for n in ("huge", "bomb", "echo")]

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body, encoding=None):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_DELETE(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()

    def do_GET(self):
        self.send_response(405); self.send_header("Content-Length", "0"); self.end_headers()

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            self.send_response(202); self.send_header("Content-Length", "0"); self.end_headers(); return
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "raw-http", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call" and msg["params"]["name"] in ("huge", "bomb"):
            text = "x" * (mb * 1_000_000)
            body = json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
            if msg["params"]["name"] == "bomb":
                return self.answer(gzip.compress(body.encode(), 9), "gzip")
            return self.answer(body.encode())
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": msg["params"]["arguments"].get("text", "")}]}
        else:
            result = {}
        self.answer(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode())

ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@pytest.fixture
def raw_http_port(tmp_path: Path) -> Iterator[int]:
    """The port of RAW_HTTP_SERVER, running."""
    script = tmp_path / "raw_http_server.py"
    script.write_text(RAW_HTTP_SERVER)
    port = free_port()
    process = subprocess.Popen([sys.executable, str(script), str(port), str(HUGE_MB)])
    try:
        wait_for_port(port, process, 20, "the raw HTTP server")
        yield port
    finally:
        stop_process(process)


async def test_an_http_upstream_cannot_send_an_oversized_or_compressed_body(tmp_path: Path, raw_http_port: int) -> None:
    servers = {"raw": {"url": f"http://127.0.0.1:{raw_http_port}/mcp"}}
    execution = {
        "servers_file": servers_file(tmp_path, servers),
        "startup_wait_seconds": 60,
        "max_message_bytes": LIMIT,
    }
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
        for tool, reason in (("huge", "more than 4000000 bytes"), ("bomb", "compressed with 'gzip'")):
            started = time.perf_counter()
            tracemalloc.start()
            try:
                answer = await http.post("/execute", json={"name": f"raw__{tool}", "arguments": {}})
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            problem = assert_problem(answer, 502)
            assert reason in problem["detail"], problem
            assert peak < 16 * 2**20, (tool, peak // 2**20)
            assert time.perf_counter() - started < 10
        echo = await http.post("/execute", json={"name": "raw__echo", "arguments": {"text": "still here"}})
        assert echo.status_code == 200, echo.text
        assert echo.json()["content"] == [{"type": "text", "text": "still here"}]


async def test_an_http_upstream_result_over_a_megabyte_in_one_event_arrives_and_one_over_the_limit_fails(
    tmp_path: Path,
) -> None:
    # The SDK's own default bound on an SSE event is 1 MiB: a 1 MB text (2 MB as content and structured content)
    # from a streamable HTTP server failed, where
    # the same result over stdio arrived.
    server = HttpServer()
    server.start()
    try:
        execution = {
            "servers_file": servers_file(tmp_path, {"remote": {"url": server.url}}),
            "startup_wait_seconds": 60,
            "max_message_bytes": LIMIT,
        }
        async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
            answer = await http.post(
                "/execute", json={"name": "remote__echo", "arguments": {"text": "y" * 999, "times": 1000}}
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["truncated"] and answer.json()["total_tokens"] > 4000
            over = await http.post(
                "/execute", json={"name": "remote__echo", "arguments": {"text": "y" * 999, "times": 3000}}
            )
            assert "4000000 byte limit" in assert_problem(over, 502)["detail"]
    finally:
        server.kill()


# Pages of one tool each, every page under the bound of one message, 120 MB in all.
PAGED_SERVER = """
def handle(method, mid, msg):
    if method == "tools/list":
        page = int((msg.get("params") or {}).get("cursor") or 0)
        tool = {"name": f"t{page}", "description": "d" * 3_000_000, "inputSchema": {"type": "object"}}
        more = str(page + 1) if page < 39 else None
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool], "nextCursor": more}})
serve("pages", handle)
"""


async def test_a_tool_list_of_many_pages_is_bounded_in_all(tmp_path: Path) -> None:
    entry = scripted_entry(tmp_path, "pages", PAGED_SERVER)
    execution = {
        "servers_file": servers_file(tmp_path, {"pages": entry, "probe": probe_entry()}),
        "startup_wait_seconds": 60,
        "max_message_bytes": LIMIT,
        "max_tools_list_bytes": 10_000_000,
        "timeout_seconds": 3,  # how long the refresh waits for the server to connect
    }
    tracemalloc.start()
    try:
        async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
            _, peak = tracemalloc.get_traced_memory()
            view = (await http.get("/servers/pages")).json()
            assert view["state"] in ("backoff", "connecting") and view["tools"] == 0, view  # it retries
            assert "more than 10000000 bytes of tools" in view["health"]["last_error"], view["health"]
            refresh = await http.post("/servers/pages/refresh")
            assert "more than 10000000 bytes of tools" in assert_problem(refresh, 502)["detail"]
            echo = await http.post("/execute", json={"name": "probe__echo", "arguments": {"text": "a"}})
            assert echo.status_code == 200
    finally:
        tracemalloc.stop()
    # Before: the walk kept every page (1000 at most): 40 pages of 3 MB held 120 MB and more, 1,000 would hold 3 GB.
    assert peak < 60 * 2**20, peak // 2**20


# Pages of one small tool each, and a cursor of 3 MB: 120 MB of cursors, no tool past a few bytes.
CURSOR_SERVER = """
def handle(method, mid, msg):
    page = int(((msg.get("params") or {}).get("cursor") or "0").rstrip("c"))
    if method == "tools/list":
        tool = {"name": f"t{page}", "description": "A tool", "inputSchema": {"type": "object"}}
        more = str(page + 1) + "c" * 3_000_000 if page < 39 else None
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool], "nextCursor": more}})
serve("cursors", handle)
"""


async def test_the_cursors_of_a_tool_list_count_toward_its_bound_and_are_not_kept(tmp_path: Path) -> None:
    entry = scripted_entry(tmp_path, "cursors", CURSOR_SERVER)
    execution = {
        "servers_file": servers_file(tmp_path, {"cursors": entry}),
        "startup_wait_seconds": 60,
        "max_message_bytes": LIMIT,
        "max_tools_list_bytes": 10_000_000,
    }
    tracemalloc.start()
    try:
        async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
            _, peak = tracemalloc.get_traced_memory()
            view = (await http.get("/servers/cursors")).json()
            assert view["tools"] == 0, view  # 40 tools synced before, past 120 MB of cursors
            assert "more than 10000000 bytes of tools" in view["health"]["last_error"], view["health"]
    finally:
        tracemalloc.stop()
    # Before: every cursor seen was kept, 3 MB a page (1,000 pages of 15 MB would hold 15 GB).
    assert peak < 60 * 2**20, peak // 2**20
