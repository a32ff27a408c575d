"""`toolscout bench durability`: what durable execution logging ("commit") costs /execute next to the
batched mode ("batched": the answer goes out before the row is written).

One real upstream server (mcp-server-time from PyPI, over stdio) is called through a direct MCP session (the
baseline) and through POST /execute of one in-process app (httpx ASGITransport). Each round runs a block per
mode on the same app (the log is flushed and switched between blocks, their order alternating from round
to round): calls interleaved one by one with direct calls, so drift hits both alike, then a throughput run
of a fixed number of calls with a fixed number in flight. Overhead is the /execute latency percentile
minus the direct one of the same block. Each figure is the median over `--repeats` rounds. The app uses
SQLite under a temporary folder unless `--database-url` names another database (e.g. PostgreSQL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from service.benchmarks import expect, save_report
from service.benchmarks.arguments import positive_int, whole_int
from service.cli.execute_bench import ARGUMENTS, TOOL, _throughput, _time_it, summary

MODES = ("commit", "batched")


def register_bench(bench_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = bench_subparsers.add_parser(
        "durability",
        help="time /execute with the execution log committed vs batched (p50/p99, throughput)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument(
        "--calls", type=positive_int, default=200, help="sequential calls per path and round (default 200)"
    )
    bench.add_argument("--warmup", type=whole_int, default=30, help="warm-up calls per path (default 30)")
    bench.add_argument("--repeats", type=positive_int, default=5, help="rounds; figures are their medians (default 5)")
    bench.add_argument(
        "--throughput-calls", type=positive_int, default=400, help="calls per throughput run (default 400)"
    )
    bench.add_argument(
        "--concurrency", type=positive_int, default=32, help="calls in flight in the throughput runs (default 32)"
    )
    bench.add_argument("--database-url", default=None, help="one database for both apps (default: SQLite each)")
    bench.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    bench.set_defaults(func=cmd_bench_durability)


def _app(work: Path, servers_file: Path, database_url: str | None) -> Any:
    from indexer.embedding import HashingEmbedder
    from service.main import create_app
    from service.settings import DatabaseSettings, ExecutionSettings, PolicySettings, Settings

    settings = Settings(
        data_dir=work / "data",
        demo_catalog=False,
        db=DatabaseSettings(url=database_url),
        policy=PolicySettings(rate_limit_per_minute=0),
        execution=ExecutionSettings(servers_file=servers_file, demo_servers=False, startup_wait_seconds=60),
    )
    return create_app(settings, embedder=HashingEmbedder(), keyless_by_design=True)


def _median(rounds: list[dict[str, float]], key: str) -> float:
    return round(statistics.median(r[key] for r in rounds), 3)


Call = Callable[[], Awaitable[None]]


async def _block(direct: Call, execute: Call, args: argparse.Namespace) -> dict[str, Any]:
    """One mode's figures: latency of both paths interleaved, then /execute throughput."""
    samples: dict[str, list[float]] = {"direct": [], "execute": []}
    for _ in range(args.calls):
        samples["direct"].append(await _time_it(direct))
        samples["execute"].append(await _time_it(execute))
    latency = {name: summary(values) for name, values in samples.items()}
    return {
        "direct": latency["direct"],
        "execute": latency["execute"],
        "throughput": await _throughput(execute, args.throughput_calls, args.concurrency),
    }


async def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    from service.execution.runtime import get_gateway
    from service.upstream.demo import PYTHON_DEMO, default_toolchain_dir, ensure_python_packages

    python = await ensure_python_packages(
        default_toolchain_dir(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )
    work = Path(tempfile.mkdtemp(prefix="toolscout-durability-"))
    servers_file = work / "servers.json"
    servers_file.write_text(
        json.dumps({"mcpServers": {"time": {"command": python, "args": ["-m", "mcp_server_time"]}}})
    )
    app = _app(work, servers_file, args.database_url)
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        params = StdioServerParameters(command=python, args=["-m", "mcp_server_time"])
        async with (
            Client(params, mode="legacy", cache=None) as direct,
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60
            ) as client,
        ):
            log = get_gateway(app.state.resources).log

            async def call_direct() -> None:
                result = await direct.call_tool("get_current_time", ARGUMENTS)
                expect(not result.is_error, f"the direct call failed: {result.content}")

            async def call_execute() -> None:
                response = await client.post("/execute", json={"name": TOOL, "arguments": ARGUMENTS})
                expect(response.status_code == 200, f"POST /execute answered {response.text}")

            for _ in range(args.warmup):
                await call_direct()
                await call_execute()
            for index in range(args.repeats):
                blocks = {}
                for mode in MODES if index % 2 == 0 else tuple(reversed(MODES)):
                    await log.flush(30)
                    log.durable = mode == "commit"
                    blocks[mode] = await _block(call_direct, call_execute, args)
                rounds.append(blocks)
            await log.flush(30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _report(rounds, args)


def _report(rounds: list[dict[str, dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "upstream": "mcp-server-time over stdio, tool get_current_time {timezone: UTC}",
        "database": "SQLite" if args.database_url is None else args.database_url.split("@")[-1],
        "calls_per_block": args.calls,
        "repeats": args.repeats,
        "concurrency": args.concurrency,
        "cpu_count": os.cpu_count(),
        "modes": {},
    }
    for mode in MODES:
        blocks = [r[mode] for r in rounds]
        overhead = [{key: b["execute"][key] - b["direct"][key] for key in ("p50_ms", "p99_ms")} for b in blocks]
        result["modes"][mode] = {
            "direct_p50_ms": _median([b["direct"] for b in blocks], "p50_ms"),
            "direct_p99_ms": _median([b["direct"] for b in blocks], "p99_ms"),
            "p50_ms": _median([b["execute"] for b in blocks], "p50_ms"),
            "p99_ms": _median([b["execute"] for b in blocks], "p99_ms"),
            "overhead_p50_ms": _median(overhead, "p50_ms"),
            "overhead_p99_ms": _median(overhead, "p99_ms"),
            "calls_per_second": _median([b["throughput"] for b in blocks], "calls_per_second"),
        }
    commit, batched = result["modes"]["commit"], result["modes"]["batched"]
    result["cost_of_commit"] = {
        "p50_ms": round(commit["overhead_p50_ms"] - batched["overhead_p50_ms"], 3),
        "p99_ms": round(commit["overhead_p99_ms"] - batched["overhead_p99_ms"], 3),
        "throughput_ratio": round(commit["calls_per_second"] / batched["calls_per_second"], 3),
    }
    return result


def markdown(result: dict[str, Any]) -> str:
    """The table of the README."""
    lines = [
        f"| mode | p50 ms | p99 ms | overhead p50 ms | overhead p99 ms | calls/s ({result['concurrency']} in flight) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode, stats in result["modes"].items():
        lines.append(
            f"| direct MCP ({mode} block) | {stats['direct_p50_ms']:.2f} | {stats['direct_p99_ms']:.2f} | – | – | – |"
        )
        lines.append(
            f"| /execute, {mode} | {stats['p50_ms']:.2f} | {stats['p99_ms']:.2f} | {stats['overhead_p50_ms']:.2f} | "
            f"{stats['overhead_p99_ms']:.2f} | {stats['calls_per_second']:.0f} |"
        )
    return "\n".join(lines)


def cmd_bench_durability(args: argparse.Namespace) -> int:
    result = asyncio.run(run_bench(args))
    print(json.dumps(result, indent=2))
    print()
    print(markdown(result))
    save_report(args.json_out, result)
    return 0
