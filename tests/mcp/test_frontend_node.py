"""Real third-party clients: the MCP Inspector CLI over stdio and HTTP, and the official conformance suite on
the HTTP front end. Node 22 and both npm packages are installed by .ci/run (see tests/mcp/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from fastapi import FastAPI

from tests.mcp.conftest import node_env, node_tool, toolscout_command
from tests.processes import accepts, free_port

pytestmark = pytest.mark.node

META = ["status", "search_tools", "call_tool", "fetch_result", "run_script"]
CONFORMANCE_SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
]


INSPECTOR_TOOL_ERROR = 5  # the Inspector CLI's exit code for a tool result with isError


async def inspect(target: list[str], *args: str, cwd: Path, exit_code: int = 0) -> Any:
    """Run `inspector --cli` once and parse its JSON answer."""
    inspector = node_tool("inspector")
    result = await anyio.run_process(
        [str(inspector), "--cli", *target, *args], cwd=cwd, env=node_env(), check=False
    )
    output = result.stdout.decode()
    assert result.returncode == exit_code, f"{output}\n{result.stderr.decode()}"
    return json.loads(output)


@pytest.fixture
async def http_frontend(live_api: tuple[str, FastAPI], tmp_path: Path) -> AsyncIterator[str]:
    """`toolscout mcp --transport http --mode full` as a child process; yields its MCP endpoint."""
    port = free_port()
    command = [*toolscout_command(), "mcp", "--transport", "http", "--mode", "full"]
    process: Process = await anyio.open_process(
        [*command, "--api-url", live_api[0], "--port", str(port)], cwd=tmp_path
    )
    try:
        with anyio.fail_after(30):
            while not accepts(port):  # noqa: ASYNC110 - a child process offers nothing to wait on
                assert process.returncode is None, "the front end exited at start-up"
                await anyio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
        await process.aclose()


async def test_inspector_lists_and_calls_over_stdio(live_api: tuple[str, FastAPI], tmp_path: Path) -> None:
    target = [*toolscout_command(), "mcp", "--api-url", live_api[0]]
    listed = await inspect(target, "--method", "tools/list", cwd=tmp_path)
    assert [t["name"] for t in listed["tools"]] == META
    found = await inspect(
        target,
        "--method",
        "tools/call",
        "--tool-name",
        "search_tools",
        "--tool-arg",
        "query=probe__echo",
        "k=1",
        cwd=tmp_path,
    )
    assert json.loads(found["content"][0]["text"])["tools"][0]["name"] == "probe__echo"
    called = await inspect(
        target,
        "--method",
        "tools/call",
        "--tool-name",
        "call_tool",
        "--tool-arg",
        "name=probe__echo",
        'arguments={"text": "inspected", "times": 2}',
        cwd=tmp_path,
    )
    assert called["isError"] is False and called["content"][0]["text"] == "inspected inspected"


async def test_inspector_lists_and_calls_over_http(http_frontend: str, tmp_path: Path) -> None:
    listed = await inspect([http_frontend], "--method", "tools/list", cwd=tmp_path)
    names = [t["name"] for t in listed["tools"]]
    assert len(names) == 85 + 7 + 1 and "probe__echo" in names and "github__create_issue" in names  # and run_script
    assert "run_script" in names
    called = await inspect(
        [http_frontend],
        "--method",
        "tools/call",
        "--tool-name",
        "probe__echo",
        "--tool-arg",
        "text=over http",
        cwd=tmp_path,
    )
    assert called["content"][0]["text"] == "over http"
    failed = await inspect(
        [http_frontend],
        "--method",
        "tools/call",
        "--tool-name",
        "probe__fail",
        "--tool-arg",
        "reason=broken",
        cwd=tmp_path,
        exit_code=INSPECTOR_TOOL_ERROR,
    )
    assert failed["isError"] is True and "broken" in failed["content"][0]["text"]


@pytest.mark.parametrize("scenario", CONFORMANCE_SCENARIOS)
async def test_conformance_suite_passes_on_the_http_front_end(
    http_frontend: str, tmp_path: Path, scenario: str
) -> None:
    conformance = node_tool("conformance")
    out = tmp_path / "conformance"
    result = await anyio.run_process(
        [str(conformance), "server", "--url", http_frontend, "--scenario", scenario, "-o", str(out)],
        cwd=tmp_path,
        env=node_env(),
        check=False,
    )
    report = result.stdout.decode() + result.stderr.decode()
    [checks_file] = out.glob("*/checks.json")
    checks = json.loads(checks_file.read_text())
    assert checks and all(c["status"] == "SUCCESS" for c in checks), report
    assert result.returncode == 0, report
