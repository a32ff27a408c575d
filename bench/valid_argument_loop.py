"""How long the event loop is held by one valid call of ~1.5 MB of arguments, through Executor.execute.

Usage: python bench/valid_argument_loop.py [--calls 20] [--rows 15000]

An in-process app (hashing embedder) with mcp-server-time over stdio; each call sends get_current_time a valid
`timezone` and --rows extra rows (the tool's schema allows extra properties: ~1.5 MB at 15,000). Figures, medians
over --calls:
- stage_loop_cpu_ms: the event loop's CPU time (its thread's) from the argument check's start to the count of
  their tokens: what the executor does on the loop around the check (the check itself runs in a worker thread);
- call_loop_cpu_ms: the loop's CPU time for the whole call (the MCP client's encoding, the result ...);
- loop_held_ms, longest_stall_ms: a ticker waking every millisecond records how late each wake-up came (wall
  time, so other processes on the machine show too);
- json_dumps_ms: json.dumps of those arguments alone."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

TICK = 0.001


async def held(call: Any) -> tuple[float, float]:
    """(total ms the loop was held, longest stall ms) while `call()` runs."""
    delays: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            delays.append(max(0.0, time.perf_counter() - before - TICK))

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        await call()
    finally:
        done.set()
        await task
    late = [d for d in delays if d > 0.002]  # below 2 ms is the timer's own jitter
    return sum(late) * 1000, max(delays, default=0.0) * 1000


def time_stage(executor: Any, stages: list[float]) -> None:
    """Record the loop thread's CPU time from each argument check's start to its tokens' count."""
    from service.execution import executor as module

    check, count = executor.validator.check, module.count_tokens_async
    started: list[float] = []

    async def timed_check(*args: Any, **kwargs: Any) -> None:
        started.append(time.thread_time())
        await check(*args, **kwargs)

    async def timed_count(text: str) -> int:
        tokens = await count(text)
        stages.append((time.thread_time() - started.pop()) * 1000)
        return tokens

    executor.validator.check, module.count_tokens_async = timed_check, timed_count


async def loop_cpu(call: Callable[[], Awaitable[None]]) -> float:
    """The loop thread's CPU ms while `call()` runs."""
    started = time.thread_time()
    await call()
    return (time.thread_time() - started) * 1000


async def run(calls: int, rows: int) -> dict[str, Any]:
    from indexer.embedding import HashingEmbedder
    from service.execution.runtime import get_gateway
    from service.main import create_app
    from service.policy.callers import OPEN_CALLER
    from service.settings import ExecutionSettings, PolicySettings, Settings
    from service.upstream.demo import PYTHON_DEMO, default_toolchain_dir, ensure_python_packages

    logging.getLogger("service.policy.service").setLevel(logging.ERROR)  # this bench runs keyless on purpose
    python = await ensure_python_packages(
        default_toolchain_dir(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )
    arguments = {
        "timezone": "UTC",
        "rows": [{"id": i, "tags": [1, 2], "note": "x" * 60} for i in range(rows)],
    }
    size = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))
    with tempfile.TemporaryDirectory(prefix="toolscout-bench-") as tmp:
        servers_file = Path(tmp) / "servers.json"
        servers_file.write_text(
            json.dumps({"mcpServers": {"time": {"command": python, "args": ["-m", "mcp_server_time"]}}})
        )
        settings = Settings(
            data_dir=Path(tmp) / "data",
            demo_catalog=False,
            policy=PolicySettings(rate_limit_per_minute=0),
            execution=ExecutionSettings(servers_file=servers_file, demo_servers=False, startup_wait_seconds=60),
        )
        settings.execution.result_token_budget = 200
        app = create_app(settings, embedder=HashingEmbedder())
        async with app.router.lifespan_context(app):
            executor = get_gateway(app.state.resources).executor

            async def call() -> None:
                await executor.execute(OPEN_CALLER, "time__get_current_time", arguments)

            await call()
            stages: list[float] = []
            time_stage(executor, stages)
            measured = [await held(call) for _ in range(calls)]
            cpu = [await loop_cpu(call) for _ in range(calls)]
    dumps = []
    for _ in range(calls):
        started = time.perf_counter()
        json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        dumps.append((time.perf_counter() - started) * 1000)
    return {
        "argument_bytes": size,
        "calls": calls,
        "stage_loop_cpu_ms_p50": round(statistics.median(stages), 2),
        "call_loop_cpu_ms_p50": round(statistics.median(cpu), 1),
        "loop_held_ms_p50": round(statistics.median(m[0] for m in measured), 1),
        "longest_stall_ms_p50": round(statistics.median(m[1] for m in measured), 1),
        "json_dumps_ms_p50": round(statistics.median(dumps), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="calls measured (default 20)")
    parser.add_argument("--rows", type=int, default=15_000, help="rows of the argument (default 15000, ~1.5 MB)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.calls, args.rows)), indent=2))


if __name__ == "__main__":
    main()
