"""A small real MCP server for the upstream tests, run as a child process over stdio or streamable HTTP.

    python tests/integration/mcp_test_server.py stdio
    python tests/integration/mcp_test_server.py http PORT

Tools: `echo`, `sleep` (outlives timeouts), `big` (a result of many tokens), `pid`, `fail` (a tool error),
`add_tool` (adds a tool and sends notifications/tools/list_changed) and `crash` (the process exits mid-call).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("toolscout-test", version="1.0.0", log_level="WARNING")


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


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    else:
        port = int(sys.argv[2])
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=port))


if __name__ == "__main__":
    main()
