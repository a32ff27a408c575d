"""Arguments of many small JSON values, valid or not, as the event loop meets them: the code-mode engine's messages
and the MCP client's copy of a call's request are built with the cyclic collector paused.

Each object a JSON parser or pydantic's model_dump makes survives until the value is whole, so every collection the
allocations trigger walks the growing value (and the arguments it copies) for nothing: measured on a live service,
a script's call to a missing tool with 110,000 small objects held the loop 0.25-0.65 s while its message was read
(20 such calls: 9.3 s of another client's /healthz waits over 50 ms, 3.4 s now), and the MCP client's copy of
1.9 MB of valid arguments 0.4-0.7 s a call (another client's longest wait 721 ms, 114 ms now). Which collections
run is deterministic, where timings on this shared machine are not: the tests count the collections that start
inside those steps."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.security.conftest import bearer, cli_key, make_settings, probe_entry, running, servers_file
from tests.security.scripted_servers import scripted_entry

SMALL_OBJECTS = 100_000  # {"a": []}: two containers each, 0.9 MB of JSON
# An upstream whose one tool answers SMALL_OBJECTS small objects as its structured content.
DUMP_SERVER = f"""
def handle(method, mid, msg):
    if method == "tools/list":
        tool = {{"name": "dump", "description": "Dump the records", "inputSchema": {{"type": "object"}}}}
        send({{"jsonrpc": "2.0", "id": mid, "result": {{"tools": [tool]}}}})
    elif method == "tools/call":
        records = {{"records": [{{"a": []}} for _ in range({SMALL_OBJECTS})]}}
        result = {{"content": [{{"type": "text", "text": "records"}}], "structuredContent": records}}
        send({{"jsonrpc": "2.0", "id": mid, "result": result}})
serve("dump", handle)
"""


@contextmanager
def collections_inside(inside: Callable[[list[str]], bool]) -> Iterator[list[int]]:
    """The generations of the collections that start while the stack (qualified function names, innermost first)
    of the thread that triggers them satisfies `inside`."""
    found: list[int] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase != "start":
            return
        names, frame = [], sys._getframe(1)
        while frame is not None:
            names.append(frame.f_code.co_qualname)
            frame = frame.f_back
        if inside(names):
            found.append(int(info["generation"]))

    gc.callbacks.append(record)
    try:
        yield found
    finally:
        gc.callbacks.remove(record)


def reading_a_message(names: list[str]) -> bool:
    return "Sandbox.receive" in names or "strict_json" in names


def reading_an_upstream_message(names: list[str]) -> bool:
    """pydantic's read of a JSON-RPC line from a stdio server (the one collection after it walks what it made)."""
    return "TypeAdapter.validate_json" in names and "stdio_transport.<locals>.read_stdout" in names


def copying_a_request(names: list[str]) -> bool:
    """pydantic's model_dump called by the MCP client's send_request (the request's copy, before it is sent)."""
    pairs = zip(names, names[1:], strict=False)
    return any(inner == "BaseModel.model_dump" and outer == "ClientSession.send_request" for inner, outer in pairs)


async def test_reading_a_scripts_large_call_runs_no_collection(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, policy={"rate_limit_per_minute": 0.0})
    async with running(settings) as (app, http):
        dev = await cli_key(app, "dev-agent", ["dev"])
        script = f"""
const pad = []; for (let i = 0; i < {SMALL_OBJECTS}; i++) pad.push({{a: []}});
const out = [];
for (let i = 0; i < 3; i++) {{ try {{ await tools.nowhere__tool({{pad}}); }} catch (e) {{ out.push(e.status); }} }}
return out;
"""
        with collections_inside(reading_a_message) as collections:
            ran = await http.post("/run", json={"script": script}, headers=bearer(dev))
        assert ran.status_code == 200, ran.text
        assert ran.json()["result"] == ["not_found"] * 3, ran.json()
        assert collections == []  # main: hundreds


async def test_the_mcp_clients_copy_of_large_valid_arguments_runs_no_collection(tmp_path: Path) -> None:
    execution = {"servers_file": servers_file(tmp_path, {"probe": probe_entry()}), "startup_wait_seconds": 60}
    settings = make_settings(tmp_path, permissions=None, execution=execution)
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        call = {"name": "probe__echo", "arguments": {"text": "x", "pad": [{"a": []}] * SMALL_OBJECTS}}
        with collections_inside(copying_a_request) as collections:
            answered = await http.post("/execute", json=call, headers=bearer(admin))
        assert answered.status_code == 200, answered.text
        assert answered.json()["structured_content"] == {"result": "x"}
        assert collections == []  # main: some 300 (three of them full collections)


async def test_reading_a_large_upstream_result_runs_no_collection(tmp_path: Path) -> None:
    dump = scripted_entry(tmp_path, "dump", DUMP_SERVER)
    execution = {"servers_file": servers_file(tmp_path, {"dump": dump}), "startup_wait_seconds": 60}
    settings = make_settings(tmp_path, permissions=None, execution=execution)
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        with collections_inside(reading_an_upstream_message) as collections:
            answered = await http.post("/execute", json={"name": "dump__dump", "arguments": {}}, headers=bearer(admin))
        assert answered.status_code == 200, answered.text
        assert answered.json()["truncated"] is True  # the records, cut to the result budget
        assert collections == []  # main: hundreds
