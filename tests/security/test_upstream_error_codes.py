"""An upstream server's own error answer is that call's failure, whatever its code: -32000, the JSON-RPC code of a
generic server error, is also the SDK's code for a closed connection, and any caller who could call a tool answering
it restarted the server under everyone's calls in flight."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from service.execution.runtime import get_gateway
from tests.security.conftest import assert_problem, make_settings, running, servers_file
from tests.security.scripted_servers import scripted_entry

# A hand-written stdio server: `err` answers a JSON-RPC error -32000; `slow` answers after a second, on a thread.
SERVER = """
def slow(mid):
    time.sleep(1.0)
    send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "slow done"}]}})
tools = [{"name": n, "description": "A tool called " + n, "inputSchema": {"type": "object"}} for n in ("err", "slow")]
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call" and msg["params"]["name"] == "err":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32000, "message": "quota exceeded"}})
    elif method == "tools/call":
        threading.Thread(target=slow, args=(mid,)).start()
serve("codes", handle)
"""


async def test_an_error_answer_of_code_32000_fails_only_its_call(tmp_path: Path) -> None:
    entry = scripted_entry(tmp_path, "codes", SERVER)
    execution = {"servers_file": servers_file(tmp_path, {"codes": entry}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        health = get_gateway(app.state.resources).pool.get("codes").health
        pid = health.pid
        in_flight = asyncio.create_task(http.post("/execute", json={"name": "codes__slow", "arguments": {}}))
        await asyncio.sleep(0.3)
        failed = await http.post("/execute", json={"name": "codes__err", "arguments": {}})
        problem = assert_problem(failed, 502)
        # Was "failed during err: the connection closed; it is being restarted", and the slow call a 502 too.
        assert problem["detail"] == "MCP server 'codes' answered err with error -32000: quota exceeded", problem
        assert "restarting" not in problem
        slow = await in_flight
        assert slow.status_code == 200, slow.text
        assert slow.json()["content"] == [{"type": "text", "text": "slow done"}]
        assert health.pid == pid and health.restarts == 0 and health.state == "ready"


# A server announcing tools/list_changed every 10 ms, each listing changing all 50 descriptions.
FLAPPING_SERVER = """
version = [0]
def flap():
    while True:
        time.sleep(0.01)
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
def handle(method, mid, msg):
    if method == "notifications/initialized":
        threading.Thread(target=flap, daemon=True).start()
    elif method == "tools/list":
        version[0] += 1
        tools = [{"name": f"t{i}", "description": f"Tool {i}, version {version[0]}", "inputSchema": {"type": "object"}}
                 for i in range(50)]
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
serve("flap", handle, {"tools": {"listChanged": True}})
"""


async def test_a_server_flapping_its_tool_list_is_listed_again_at_most_once_a_second(tmp_path: Path) -> None:
    entry = scripted_entry(tmp_path, "flap", FLAPPING_SERVER)
    execution = {"servers_file": servers_file(tmp_path, {"flap": entry}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        health = get_gateway(app.state.resources).pool.get("flap").health
        syncs, cpu = health.syncs, time.process_time()
        await asyncio.sleep(5)
        # Was 10 syncs a second (each re-embedding the 50 tools and adding a catalog change), half a core of CPU.
        assert health.list_changed > 100 and health.syncs - syncs <= 6, (health.list_changed, health.syncs)
        assert time.process_time() - cpu < 1.5
        assert (await http.get("/tools", params={"limit": 100})).json()["tools"] == []  # changed since listed: held
        tools = (await http.get("/tools", params={"limit": 100, "held": "true"})).json()["tools"]
        assert len(tools) == 50 and all("version" in tool["description"] for tool in tools)  # still in step


# A server whose error answer says 5 MB: its message reached the caller whole, past the result token budget.
LOUD_SERVER = """
tools = [{"name": "loud", "description": "Fails at length", "inputSchema": {"type": "object"}}]
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "bad " + "x" * 5_000_000}})
serve("loud", handle)
"""


async def test_an_error_answer_is_quoted_to_its_caller_in_bounded_length(tmp_path: Path) -> None:
    entry = scripted_entry(tmp_path, "loud", LOUD_SERVER)
    execution = {"servers_file": servers_file(tmp_path, {"loud": entry}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
        failed = await http.post("/execute", json={"name": "loud__loud", "arguments": {}})
        problem = assert_problem(failed, 502)
        assert problem["detail"].startswith("MCP server 'loud' answered loud with error -32602: bad xxx"), problem
        assert problem["detail"].endswith("… (5,000,004 characters)"), problem["detail"][-80:]
        assert len(failed.content) < 4000  # 5,000,289 bytes
        # A script made 20 such calls: a 100 MB answer (and 50 of them 250 MB, the service's memory 5 times that).
        script = (
            "let n = 0; for (let i = 0; i < 20; i++) "
            "{ try { await tools.loud__loud({}) } catch (e) { n += e.message.length } } return n"
        )
        run = await http.post("/run", json={"script": script})
        assert run.status_code == 200, run.text[:300]
        assert run.json()["error"] is None and run.json()["result"] < 20 * 2200
        assert len(run.content) < 200_000
