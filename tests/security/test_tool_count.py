"""An upstream server lists at most `execution.max_tools_per_server` tools: syncing a tool costs the service ~50 KB
of memory at its peak whatever its size (50,000 tools of 60 bytes each: +2.7 GB and 45 s), so the 64 MB bound on a
tools/list's bytes alone let one server list a million tools and take the service down."""

from __future__ import annotations

from pathlib import Path

from service.execution.runtime import get_gateway
from tests.security.conftest import assert_problem, make_settings, probe_entry, running, servers_file
from tests.security.scripted_servers import scripted_entry

# Lists argv[1] tools of a few bytes each, a thousand a page.
MANY_SERVER = """
count = int(sys.argv[1])
def handle(method, mid, msg):
    if method == "tools/list":
        start = int((msg.get("params") or {}).get("cursor") or 0)
        tools = [{"name": "t%d" % i, "description": "Tool %d" % i, "inputSchema": {"type": "object"}}
                 for i in range(start, min(count, start + 1000))]
        result = {"tools": tools, **({"nextCursor": str(start + 1000)} if start + 1000 < count else {})}
        send({"jsonrpc": "2.0", "id": mid, "result": result})
serve("many", handle)
"""


async def test_a_server_listing_more_tools_than_allowed_is_not_synced(tmp_path: Path) -> None:
    servers = {
        "many": scripted_entry(tmp_path, "many", MANY_SERVER, "2500"),
        "few": scripted_entry(tmp_path, "few", MANY_SERVER, "2000"),
        "probe": probe_entry(),
    }
    execution = {
        "servers_file": servers_file(tmp_path, servers),
        "startup_wait_seconds": 60,
        "max_tools_per_server": 2000,
        "timeout_seconds": 3,
    }
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        view = (await http.get("/servers/many")).json()
        assert view["tools"] == 0 and view["state"] in ("backoff", "connecting"), view
        assert "more than 2000 tools (execution.max_tools_per_server)" in view["health"]["last_error"], view["health"]
        refresh = await http.post("/servers/many/refresh")
        assert "more than 2000 tools" in assert_problem(refresh, 502)["detail"]
        assert (await http.get("/tools", params={"server": "many", "limit": 1})).json()["total"] == 0
        # A server at the limit syncs whole, and the others are untouched.
        assert get_gateway(app.state.resources).pool.get("few").health.tools == 2000
        echo = await http.post("/execute", json={"name": "probe__echo", "arguments": {"text": "a"}})
        assert echo.status_code == 200
