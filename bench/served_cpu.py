"""The server's CPU per search, served over real HTTP under wrk: a measure the machine's other load moves less than
latency or requests/s (issue #11; docs/benchmarks-history.md, "2026-12-07, later: stop 45's long requests, and
fusion").

Serves a data folder from a source tree (`toolscout serve` in a child process, the query cache off as in `bench load`),
warms it, then runs wrk for each kind and concurrency asked and reads the server's CPU from /proc before and after:
every thread together, the event loop's thread (the process's first) alone, and the other threads together (the
embedder's, ONNX Runtime's, the index's). Prints one JSON line a run. Alternate two trees, several rounds, and compare
the medians.

Usage: PYTHONPATH=. python bench/served_cpu.py TREE DATA_FOLDER PORT [--kinds short,long] [--concurrency 1,32]
                                                [--seconds 10] [--label NAME] [--onnx-threads N]
(DATA_FOLDER: one `toolscout bench scale --data-root` indexed, served by nothing else; PORT: a free port.)"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from service.benchmarks.load import stop_server, wait_until_ready, wrk_run
from service.benchmarks.search import bench_queries
from service.settings import Settings


def _ticks(stat: Path) -> int:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def cpu_ticks(pid: int) -> dict[int, int]:
    """utime + stime of each live thread of `pid`, in clock ticks."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = _ticks(task / "stat")
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def serve(tree: str, folder: str, port: int, onnx_threads: int | None) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": tree,
        "TOOLSCOUT_DATA_DIR": folder,
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
        "TOOLSCOUT_EMBEDDING__MODELS_DIR": str(Settings().models_dir.resolve()),
        "TOOLSCOUT_EMBEDDING__CACHE_SIZE": "0",  # every search embeds its query
    }
    if onnx_threads is not None:
        env["TOOLSCOUT_EMBEDDING__THREADS"] = str(onnx_threads)
    command = [sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))"]
    process = subprocess.Popen(
        [*command, "serve", "--port", str(port)],
        env=env,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until_ready(process, f"http://127.0.0.1:{port}", 300)
    return process


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{args.port}"
    process = serve(args.tree, args.folder, args.port, args.onnx_threads)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for kind in args.kinds.split(","):
                queries = bench_queries(kind, 2000)
                wrk_run(url, queries[:50], 4, 2, Path(work))
                for concurrency in (int(c) for c in args.concurrency.split(",")):
                    before, started = cpu_ticks(process.pid), time.monotonic()
                    result = wrk_run(url, queries, concurrency, args.seconds, Path(work))
                    after, elapsed = cpu_ticks(process.pid), time.monotonic() - started
                    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
                    per = {tid: (after[tid] - before.get(tid, 0)) * tick_ms for tid in after}
                    requests = max(1, result["requests"])
                    loop = per.get(process.pid, 0.0)
                    total = sum(per.values())
                    rows.append(
                        {
                            "label": args.label,
                            "kind": kind,
                            "c": concurrency,
                            "req_s": result["requests_per_s"],
                            "p50_ms": result["p50_ms"],
                            "p99_ms": result["p99_ms"],
                            "errors": result["errors"],
                            "cpu_ms": round(total / requests, 3),
                            "loop_cpu_ms": round(loop / requests, 3),
                            "other_cpu_ms": round((total - loop) / requests, 3),
                            "busiest_threads_ms": sorted((round(v / requests, 3) for v in per.values()), reverse=True)[
                                :4
                            ],
                            "load": round(os.getloadavg()[0], 1),
                            "seconds": round(elapsed, 1),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        stop_server(process)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree")
    parser.add_argument("folder")
    parser.add_argument("port", type=int)
    parser.add_argument("--kinds", default="short,long")
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--label", default=None)
    parser.add_argument("--onnx-threads", type=int, default=None)
    arguments = parser.parse_args()
    arguments.label = arguments.label or Path(arguments.tree).name
    measure(arguments)
