"""`toolscout bench execute`: what /execute adds to a direct MCP call, and how many calls a second it carries.

One real upstream server (mcp-server-time from PyPI, over stdio) is called four ways, interleaved call by
call so that drift hits every path alike:

- direct: an MCP client session straight to a second instance of the same server (the baseline);
- function: `Executor.execute` in-process (resolve, policy, validation, upstream call, token count, log);
- asgi: POST /execute through the whole FastAPI app in-process (httpx ASGITransport, no socket);
- http: POST /execute to the service run by uvicorn in a child process, over loopback.

Overhead is each path's latency percentile minus the direct one's. Throughput runs a fixed number of calls
with a fixed number in flight on each path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from service.benchmarks import expect, save_report
from service.benchmarks.arguments import positive_int, whole_int
from service.http_transport import async_nodelay_transport
from service.usage.rollups import percentile

TOOL = "time__get_current_time"
ARGUMENTS = {"timezone": "UTC"}


def register_bench(bench_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    execute = bench_subparsers.add_parser(
        "execute",
        help="time /execute against a direct MCP call (p50, p99) and concurrent throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    execute.add_argument("--calls", type=positive_int, default=500, help="sequential calls per path (default 500)")
    execute.add_argument("--warmup", type=whole_int, default=50, help="warm-up calls per path (default 50)")
    execute.add_argument(
        "--throughput-calls", type=positive_int, default=1000, help="calls per throughput run (default 1000)"
    )
    execute.add_argument(
        "--concurrency", type=positive_int, default=32, help="calls in flight in the throughput runs (default 32)"
    )
    execute.add_argument("--no-http", action="store_true", help="skip the uvicorn child process")
    execute.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    execute.set_defaults(func=cmd_bench_execute)


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(samples_ms, 0.50), 3),
        "p90_ms": round(percentile(samples_ms, 0.90), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
        "mean_ms": round(statistics.fmean(samples_ms), 3),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _time_it(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def _throughput(call: Callable[[], Awaitable[Any]], total: int, concurrency: int) -> dict[str, float]:
    limiter = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with limiter:
            await call()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(total)))
    elapsed = time.perf_counter() - started
    return {
        "calls": total,
        "concurrency": concurrency,
        "seconds": round(elapsed, 3),
        "calls_per_second": round(total / elapsed, 1),
    }


def _start_http_service(data_dir: Path, servers_file: Path, port: int) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "TOOLSCOUT_DATA_DIR": str(data_dir),
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__SERVERS_FILE": str(servers_file),
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
        "TOOLSCOUT_LOG_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "service.main:app_factory",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def _wait_http(client: httpx.AsyncClient, process: subprocess.Popen[bytes], limit_seconds: float) -> None:
    deadline = time.monotonic() + limit_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = (process.stderr.read() if process.stderr else b"").decode(errors="replace")[-2000:]
            raise RuntimeError(f"the service exited with code {process.returncode}: {error}")
        try:
            response = await client.get("/servers/time")
            if response.status_code == 200 and response.json().get("state") == "ready":
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the service did not get ready in time")


async def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    from indexer.embedding import HashingEmbedder
    from service.execution.runtime import get_gateway
    from service.main import create_app
    from service.policy.callers import OPEN_CALLER
    from service.settings import ExecutionSettings, PolicySettings, Settings
    from service.upstream.demo import PYTHON_DEMO, default_toolchain_dir, ensure_python_packages

    python = await ensure_python_packages(
        default_toolchain_dir(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )
    work = Path(tempfile.mkdtemp(prefix="toolscout-bench-"))
    servers_file = work / "servers.json"
    servers_file.write_text(
        json.dumps({"mcpServers": {"time": {"command": python, "args": ["-m", "mcp_server_time"]}}})
    )
    settings = Settings(
        data_dir=work / "inprocess",
        demo_catalog=False,
        policy=PolicySettings(rate_limit_per_minute=0),
        execution=ExecutionSettings(servers_file=servers_file, demo_servers=False, startup_wait_seconds=60),
    )
    app = create_app(settings, embedder=HashingEmbedder(), keyless_by_design=True)
    http_process = None
    port = _free_port()
    if not args.no_http:
        http_process = _start_http_service(work / "http", servers_file, port)
    direct_params = StdioServerParameters(command=python, args=["-m", "mcp_server_time"])
    nodelay = async_nodelay_transport()
    try:
        async with (
            app.router.lifespan_context(app),
            Client(direct_params, mode="legacy", cache=None) as direct,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as asgi,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60, transport=nodelay) as http,
        ):
            executor = get_gateway(app.state.resources).executor

            async def call_direct() -> None:
                result = await direct.call_tool("get_current_time", ARGUMENTS)
                expect(not result.is_error, f"the direct call failed: {result.content}")

            async def call_function() -> None:
                result = await executor.execute(OPEN_CALLER, TOOL, ARGUMENTS)
                expect(result.status == "ok", f"Executor.execute answered {result.status}: {result.content}")

            async def call_asgi() -> None:
                response = await asgi.post("/execute", json={"name": TOOL, "arguments": ARGUMENTS})
                expect(response.status_code == 200, f"POST /execute (ASGI) answered {response.text}")

            async def call_http() -> None:
                response = await http.post("/execute", json={"name": TOOL, "arguments": ARGUMENTS})
                expect(response.status_code == 200, f"POST /execute (HTTP) answered {response.text}")

            paths: dict[str, Callable[[], Awaitable[None]]] = {
                "direct": call_direct,
                "function": call_function,
                "asgi": call_asgi,
            }
            if http_process is not None:
                await _wait_http(http, http_process, 180)
                paths["http"] = call_http
            for call in paths.values():
                for _ in range(args.warmup):
                    await call()
            samples: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(args.calls):
                for name, call in paths.items():
                    samples[name].append(await _time_it(call))
            latency = {name: summary(values) for name, values in samples.items()}
            base = latency["direct"]
            overhead = {
                name: {
                    "p50_ms": round(latency[name]["p50_ms"] - base["p50_ms"], 3),
                    "p99_ms": round(latency[name]["p99_ms"] - base["p99_ms"], 3),
                }
                for name in paths
                if name != "direct"
            }
            throughput = {
                name: await _throughput(call, args.throughput_calls, args.concurrency) for name, call in paths.items()
            }
            await get_gateway(app.state.resources).log.flush(30)
    finally:
        if http_process is not None:
            http_process.terminate()
            try:
                http_process.wait(30)
            except subprocess.TimeoutExpired:
                http_process.kill()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "upstream": "mcp-server-time over stdio, tool get_current_time {timezone: UTC}",
        "calls_per_path": args.calls,
        "cpu_count": os.cpu_count(),
        "latency": latency,
        "overhead": overhead,
        "throughput": throughput,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| path | p50 ms | p99 ms | overhead p50 ms | overhead p99 ms | calls/s ("
        + f"{next(iter(result['throughput'].values()))['concurrency']} in flight) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, stats in result["latency"].items():
        extra = result["overhead"].get(name, {"p50_ms": 0.0, "p99_ms": 0.0})
        lines.append(
            f"| {name} | {stats['p50_ms']:.2f} | {stats['p99_ms']:.2f} | "
            f"{'–' if name == 'direct' else format(extra['p50_ms'], '.2f')} | "
            f"{'–' if name == 'direct' else format(extra['p99_ms'], '.2f')} | "
            f"{result['throughput'][name]['calls_per_second']:.0f} |"
        )
    return "\n".join(lines)


def cmd_bench_execute(args: argparse.Namespace) -> int:
    result = asyncio.run(run_bench(args))
    print(json.dumps(result, indent=2))
    print()
    print(markdown(result))
    save_report(args.json_out, result)
    return 0
