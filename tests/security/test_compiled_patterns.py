"""The argument check keeps a bounded number of compiled `pattern`s: a compiled pattern may hold megabytes
(`[\\w\\W]{1900}`, 12 characters, holds 3.6 MB; `[\\w\\W]{5000}` 6.8 MB), and the check kept 4,096 of them, one per
distinct pattern of the tools callers called: the schemas of one hostile server could make a caller's calls hold
28 GB."""

from __future__ import annotations

from pathlib import Path

from service.execution.keywords import COMPILED_PATTERNS, _regex
from tests.security.conftest import make_settings, running, servers_file
from tests.security.scripted_servers import scripted_entry

TOOLS, PROPERTIES = 3, 40

# Tools t0..t(argv[1]-1), each with argv[2] string properties of a pattern of their own (`^a{0,N}$`), answering "ok".
PATTERNED_TOOLS = """
tools, properties = int(sys.argv[1]), int(sys.argv[2])
def schema(tool):
    first = 1 + tool * properties
    return {"type": "object", "properties": {
        "p%d" % n: {"type": "string", "pattern": "^a{0,%d}$" % (first + n)} for n in range(properties)}}
def handle(method, mid, msg):
    if method == "tools/list":
        listed = [{"name": "t%d" % t, "description": "Patterned", "inputSchema": schema(t)} for t in range(tools)]
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": listed}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "ok"}]}})
serve("patterned", handle)
"""


async def test_calls_of_many_patterned_tools_keep_a_bounded_number_of_compiled_patterns(tmp_path: Path) -> None:
    servers = {"patterned": scripted_entry(tmp_path, "patterned", PATTERNED_TOOLS, str(TOOLS), str(PROPERTIES))}
    execution = {"servers_file": servers_file(tmp_path, servers), "startup_wait_seconds": 60}
    _regex.cache_clear()
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_, http):
        arguments = {f"p{n}": "a" for n in range(PROPERTIES)}
        for tool in range(TOOLS):
            call = await http.post("/execute", json={"name": f"patterned__t{tool}", "arguments": arguments})
            assert call.status_code == 200 and call.json()["content"][0]["text"] == "ok", call.text
        refused = await http.post("/execute", json={"name": "patterned__t2", "arguments": {"p0": "b"}})
        assert refused.status_code == 422 and refused.json()["errors"][0]["pointer"] == "/p0", refused.text
    assert TOOLS * PROPERTIES > COMPILED_PATTERNS
    assert _regex.cache_info().currsize == COMPILED_PATTERNS  # was one per pattern called: 120
