"""How long one caller's large arguments of many small JSON values hold a live service's event loop, as another
client sees it: its `GET /healthz`, sent every 5 ms meanwhile, and the waits past 50 ms.

Usage: python bench/loop_stalls.py --url http://127.0.0.1:8765 --key tsk_... [--tool probe__echo]
       [--objects 180000] [--script-objects 110000] [--script-calls 20]

Two loads, one after the other: one POST /execute of `--tool` (a tool whose schema takes extra properties, such as
the test server's echo, tests/upstream/mcp_test_server.py) with `text` and --objects `{"a": []}` (1.98 MB at
180,000), and one code-mode script making --script-calls calls of a missing tool with --script-objects of them
each (every call refused, its message read all the same). Measured for README (Code mode; REST API) against main
and this code on one service, back to back."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

PROBE_SECONDS = 0.005


async def watched(url: str, load: Callable[[], Awaitable[str]]) -> str:
    """The load's own line, then another client's /healthz latencies while it ran."""
    stop, latencies = asyncio.Event(), []

    async def probe() -> None:
        async with httpx.AsyncClient() as http:
            while not stop.is_set():
                started = time.perf_counter()
                await http.get(url + "/healthz")
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(PROBE_SECONDS)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.5)
    first = len(latencies)
    started = time.perf_counter()
    line = await load()
    elapsed = time.perf_counter() - started
    stop.set()
    await prober
    seen = latencies[first:] or [0.0]
    waits = sum(x for x in seen if x > 0.05)
    return (
        f"{line}: {elapsed:.2f} s; /healthz median {statistics.median(seen) * 1000:.1f} ms, "
        f"longest {max(seen) * 1000:.0f} ms, waits over 50 ms {waits:.1f} s"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--tool", default="probe__echo")
    parser.add_argument("--objects", type=int, default=180_000)
    parser.add_argument("--script-objects", type=int, default=110_000)
    parser.add_argument("--script-calls", type=int, default=20)
    args = parser.parse_args()
    headers = {"Authorization": f"Bearer {args.key}", "Content-Type": "application/json"}
    body = json.dumps({"name": args.tool, "arguments": {"text": "x", "pad": [{"a": []}] * args.objects}})
    script = f"""
const pad = []; for (let i = 0; i < {args.script_objects}; i++) pad.push({{a: []}});
let refused = 0;
for (let i = 0; i < {args.script_calls}; i++) {{
  try {{ await tools.nowhere__tool({{pad}}); }} catch (e) {{ refused++; }}
}}
return refused;
"""
    async with httpx.AsyncClient(base_url=args.url, timeout=300, headers=headers) as http:

        async def execute() -> str:
            answer = await http.post("/execute", content=body)
            return f"/execute of {len(body) / 1e6:.2f} MB ({args.objects} objects): {answer.status_code}"

        async def run() -> str:
            answer: Any = (await http.post("/run", json={"script": script})).json()
            return f"/run, {args.script_calls} refused calls of {args.script_objects} objects: {answer.get('result')}"

        for load in (execute, run):
            print(await watched(args.url, load), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
