"""A small real MCP server for the upstream tests, run as a child process over stdio or streamable HTTP.

    python tests/upstream/mcp_test_server.py stdio
    python tests/upstream/mcp_test_server.py http PORT [HOST ...]  (HOSTs: more Host header names it accepts)
    python tests/upstream/mcp_test_server.py paged N      (low-level server listing N tools, 2 per page)
    python tests/upstream/mcp_test_server.py listed FILE  (low-level server listing the tools of a JSON file as
                                                           given, unchecked; a call answers `NAME:ARGUMENTS`)
    python tests/upstream/mcp_test_server.py deep         (JSON-RPC written by hand: `nested` answers a result whose
                                                           structuredContent nests `depth` levels, which the SDK
                                                           cannot write, or a number; `echo` answers its text)
    python tests/upstream/mcp_test_server.py deep-http PORT  (the same over streamable HTTP, JSON bodies)

Tools: `echo`, `sleep` (outlives timeouts), `big` (a result of many tokens), `pid`, `fail` (a tool error),
`add_tool` (adds a tool and sends notifications/tools/list_changed) and `crash` (the process exits mid-call).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

server = MCPServer(
    "toolscout-test",
    title="Toolscout test server",
    version="1.0.0",
    log_level="WARNING",
    instructions="Tools to exercise a gateway: echo text, sleep, fail and crash on purpose.",
)


@server.tool(description="Echo the text back, repeated `times` times.")
def echo(text: str, times: int = 1) -> str:
    return " ".join([text] * times)


@server.tool(description="Sleep for some seconds, then answer.")
async def sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="Return a long text of numbered lines.")
def big(lines: int) -> str:
    return "\n".join(f"line {i}: the quick brown fox jumps over the lazy dog" for i in range(lines))


@server.tool(description="The process id of this server.")
def pid() -> int:
    return os.getpid()


@server.tool(description="Always fails with a tool error.")
def fail(reason: str = "it failed") -> str:
    raise ToolError(reason)


@server.tool(description="Register a new tool named NAME and tell the client that the tool list changed.")
async def add_tool(name: str, ctx: Context) -> str:
    def added(value: str = "") -> str:
        return f"{name}: {value}"

    server.add_tool(added, name=name, description=f"A tool added at run time called {name}.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool(description="Exit the server process in the middle of the call.")
async def crash() -> str:
    await asyncio.sleep(0.05)
    os._exit(3)


def run_paged(count: int) -> None:
    """A low-level server whose tools/list answers two tools a page, with cursors."""
    import anyio
    import mcp_types as types
    from mcp.server import Server
    from mcp.server.stdio import stdio_server

    tools = [
        types.Tool(
            name=f"tool_{i}",
            description=f"Paged tool number {i}.",
            input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
        )
        for i in range(count)
    ]

    async def list_tools(ctx: object, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        start = int(params.cursor) if params and params.cursor else 0
        end = start + 2
        return types.ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < count else None)

    async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        x = (params.arguments or {}).get("x", 0)
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name}:{x}")])

    low = Server("toolscout-paged", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await low.run(read, write, low.create_initialization_options())

    anyio.run(serve)


def run_listed(path: str) -> None:
    """A low-level server listing the tools of a JSON file (`{"tools": [...]}`) without checking them; the file is
    read at each tools/list, so a test changes what the server lists by rewriting it."""
    import json

    import anyio
    import mcp_types as types
    from mcp.server import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(ctx: object, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        listed = json.loads(await anyio.Path(path).read_text(encoding="utf-8"))["tools"]
        return types.ListToolsResult(tools=[types.Tool.model_construct(**tool) for tool in listed])

    async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = f"{params.name}:{json.dumps(params.arguments or {}, sort_keys=True)}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    low = Server("toolscout-listed", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await low.run(read, write, low.create_initialization_options())

    anyio.run(serve)


def deep_answer(line: str) -> str | None:
    """The answer of the hand-written server to one JSON-RPC message (None to a notification): `nested` answers a
    result nested `depth` arrays deep in its structuredContent (or, with `result: "number"`, a result that is a
    number), which the SDK cannot write; `echo` answers its text."""
    import json

    from mcp_types import LATEST_PROTOCOL_VERSION

    tools = [
        {"name": "nested", "description": "A deeply nested result.", "inputSchema": {"type": "object"}},
        {"name": "echo", "description": "Echo the text.", "inputSchema": {"type": "object"}},
    ]
    request = json.loads(line)
    method, params, ident = request.get("method"), request.get("params") or {}, request.get("id")
    if ident is None:
        return None
    if method == "initialize":
        result: object = {
            "protocolVersion": params.get("protocolVersion", LATEST_PROTOCOL_VERSION),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "toolscout-deep", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {"tools": tools}
    elif method == "tools/call" and params.get("name") == "nested":
        arguments = params.get("arguments") or {}
        depth = int(arguments.get("depth", 300))
        value = "[" * depth + "]" * depth
        text = f'{{"content":[{{"type":"text","text":"ok"}}],"structuredContent":{{"deep":{value}}}}}'
        if arguments.get("result") == "number":  # a result that is no object: not of JSON-RPC's shape
            text = "5"
        return f'{{"jsonrpc":"2.0","id":{json.dumps(ident)},"result":{text}}}'
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": str((params.get("arguments") or {}).get("text", ""))}]}
    else:
        result = {}
    return json.dumps({"jsonrpc": "2.0", "id": ident, "result": result})


def run_deep() -> None:
    """The hand-written server (deep_answer) over stdio, as a hostile server would write."""
    for line in sys.stdin:
        if (answer := deep_answer(line)) is not None:
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()


def run_deep_http(port: int) -> None:
    """The hand-written server (deep_answer) over streamable HTTP: each POST answered with one JSON body."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def post(request: Request) -> Response:
        answer = deep_answer((await request.body()).decode())
        if answer is None:
            return Response(status_code=202)
        return Response(answer, media_type="application/json")

    app = Starlette(routes=[Route("/mcp", post, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "paged":
        run_paged(int(sys.argv[2]))
    elif mode == "listed":
        run_listed(sys.argv[2])
    elif mode == "deep":
        run_deep()
    elif mode == "deep-http":
        run_deep_http(int(sys.argv[2]))
    elif mode == "stdio":
        server.run("stdio")
    else:
        port = int(sys.argv[2])
        security = None
        if names := sys.argv[3:]:  # the SDK's loopback names, and these
            hosts = ["127.0.0.1", "localhost", "[::1]", *names]
            security = TransportSecuritySettings(allowed_hosts=[f"{host}:*" for host in hosts])
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=port, transport_security=security))


if __name__ == "__main__":
    main()
