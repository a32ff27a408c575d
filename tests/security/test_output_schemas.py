"""An upstream server chooses both a tool's output schema and the structured content it returns: checking one
against the other costs a bounded amount of CPU, off the event loop, as the check of arguments does. The MCP
client's own check ran jsonschema with Python's re on the event loop: a `^(a+)+$` pattern over 27 characters of
the server's own result held every request of the service for seconds (a minute at 31 characters)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.security.conftest import assert_problem, make_settings, running, servers_file
from tests.security.scripted_servers import scripted_entry
from tests.security.test_schema_cost import FAN_OUT, MAX_LAG_SECONDS, loop_lag

SHAPED_SERVER = """
schemas = json.loads(sys.argv[1])
results = json.loads(sys.argv[2])
tools = [{"name": name, "description": "Answers structured content.", "inputSchema": {"type": "object"},
          "outputSchema": schema} for name, schema in schemas.items()]
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        structured = results[msg["params"]["name"]]
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(structured)}],
              "structuredContent": structured}})
serve("shaped", handle)
"""
BACKTRACKING = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}
SCHEMAS = {
    "redos": BACKTRACKING,
    "fanout": FAN_OUT,
    "good": BACKTRACKING,
    "wrong": {"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}},
}
RESULTS = {"redos": {"a": "a" * 27 + "b"}, "fanout": {}, "good": {"a": "aaaa"}, "wrong": {"count": "many"}}


async def test_a_result_is_checked_against_its_output_schema_within_bounds_off_the_event_loop(tmp_path: Path) -> None:
    entry = scripted_entry(tmp_path, "shaped", SHAPED_SERVER, json.dumps(SCHEMAS), json.dumps(RESULTS))
    execution = {"servers_file": servers_file(tmp_path, {"shaped": entry}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
        good = await http.post("/execute", json={"name": "shaped__good", "arguments": {}})
        assert good.status_code == 200, good.text
        assert good.json()["structured_content"] == {"a": "aaaa"}

        started = time.perf_counter()
        async with loop_lag() as lag:
            redos = await http.post("/execute", json={"name": "shaped__redos", "arguments": {}})
        body = assert_problem(redos, 502, "upstream-error")
        assert lag[0] < MAX_LAG_SECONDS, lag  # it held the loop 3.3 s
        assert "does not match its output schema" in body["detail"], body
        assert body["errors"][0]["pointer"] == "/a" and body["errors"][0]["keyword"] == "pattern", body
        assert time.perf_counter() - started < 2

        async with loop_lag() as lag:
            fanout = await http.post("/execute", json={"name": "shaped__fanout", "arguments": {}})
        body = assert_problem(fanout, 502, "upstream-error")
        assert "took more than 1 s of CPU (MAX_CHECK_CPU_SECONDS)" in body["detail"], body
        assert lag[0] < MAX_LAG_SECONDS, lag

        wrong = assert_problem(await http.post("/execute", json={"name": "shaped__wrong", "arguments": {}}), 502)
        assert wrong["errors"][0]["pointer"] == "/count" and wrong["errors"][0]["keyword"] == "type", wrong
        assert wrong["execution_id"]
