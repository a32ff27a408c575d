"""`toolscout bench load`: drive a Toolscout server in another process over real HTTP with wrk (a Lua script
cycling real queries) at several concurrencies; p50/p95/p99, requests/s and errors, short and long queries apart,
next to the embedding floor measured in the same run."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from service.benchmarks import save_report
from service.benchmarks.arguments import positive_int, positive_ints
from service.benchmarks.search import (
    POST_BATCH,
    _free_port,
    bench_queries,
    build_catalog,
    embedding_median_ms,
    floor_sample,
    peak_rss_mb,
    source_tools,
)
from service.settings import Settings

READY_TIMEOUT_SECONDS = 300.0
FIRST_SEARCH_FOLLOWING = 100  # distinct short searches after the first: its steady reference
# wrk's Lua side: cycle the request bodies, print the summary as JSON (latencies in microseconds).
WRK_SCRIPT = """
local bodies = {%s}
local i = 0
request = function()
  i = i %% #bodies + 1
  return wrk.format("POST", "/search", {["Content-Type"] = "application/json"}, bodies[i])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests": %%d, "duration_us": %%d, "errors": %%d, "non2xx": %%d, ' ..
    '"p50": %%d, "p95": %%d, "p99": %%d, "max": %%d}\\n', summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout, e.status, latency:percentile(50), latency:percentile(95),
    latency:percentile(99), latency.max))
end
"""


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("load", help="load a server in another process over HTTP (wrk)")
    parser.add_argument("--url", default=None, help="a running server; default: start one with --tools tools")
    parser.add_argument(
        "--tools", type=positive_int, default=10000, help="catalog size of the started server (default 10000)"
    )
    parser.add_argument(
        "--concurrency",
        type=positive_ints,
        default="1,8,32",
        help="connections in flight, one run each (default 1,8,32)",
    )
    parser.add_argument(
        "--duration", type=positive_int, default=10, help="seconds per concurrency and query kind (default 10)"
    )
    parser.add_argument(
        "--queries", type=positive_int, default=2000, help="distinct queries cycled per kind (default 2000)"
    )
    parser.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    parser.set_defaults(func=run)


def _lua_string(text: str) -> str:
    return json.dumps(json.dumps({"query": text, "k": 5}))  # a JSON body as a double-quoted Lua string


def wrk_run(url: str, queries: list[str], concurrency: int, duration: int, workdir: Path) -> dict[str, Any]:
    """One wrk run; its summary with latencies in ms and requests/s."""
    script = workdir / "search.lua"
    script.write_text(WRK_SCRIPT % ", ".join(_lua_string(q) for q in queries))
    threads = max(1, min(concurrency, 2))
    command = [
        "wrk",
        "-t",
        str(threads),
        "-c",
        str(concurrency),
        "-d",
        f"{duration}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    line = next(row for row in done.stdout.splitlines() if row.startswith("RESULT "))
    raw = json.loads(line.removeprefix("RESULT "))
    return {
        "concurrency": concurrency,
        "requests_per_s": round(raw["requests"] / (raw["duration_us"] / 1e6), 1),
        "p50_ms": raw["p50"] / 1000,
        "p95_ms": raw["p95"] / 1000,
        "p99_ms": raw["p99"] / 1000,
        "errors": raw["errors"] + raw["non2xx"],
        "requests": raw["requests"],
    }


def first_search(url: str, queries: list[str], following: int = FIRST_SEARCH_FOLLOWING) -> dict[str, Any]:
    """The first search a server answers after /readyz, against the median of the `following` distinct searches
    after it, all from one client on one kept-alive connection (opened by a /healthz first, so the first search
    pays no connect). The issue's measure: the first search costs at most twice what the steady ones do."""
    texts = queries[: following + 1]
    with httpx.Client(base_url=url, timeout=60) as client:
        client.get("/healthz").raise_for_status()
        times = []
        for text in texts:
            start = time.perf_counter()
            client.post("/search", json={"query": text, "k": 5}).raise_for_status()
            times.append((time.perf_counter() - start) * 1000)
    steady = float(statistics.median(times[1:])) if len(times) > 1 else times[0]
    return {"first_ms": round(times[0], 2), "following_p50_ms": round(steady, 2), "ratio": round(times[0] / steady, 2)}


def embedding_floor_ms(queries: list[str]) -> float:
    """Median ms of one query embedding alone with the configured embedder, in this process."""
    from service.resources import build_resources

    embedder = build_resources(Settings()).embedder.inner
    for query in queries[:20]:
        embedder.embed([query])  # warm up
    return embedding_median_ms(embedder, queries)


class ServerNotReady(RuntimeError):
    """The benchmark's server exited or never answered /readyz."""


def wait_until_ready(process: subprocess.Popen[bytes], url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (code := process.poll()) is not None:
            raise ServerNotReady(f"toolscout serve exited with status {code} before it was ready")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise ServerNotReady(f"toolscout serve was not ready after {timeout:.0f} s")


def start_server(tools: int, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`toolscout serve` in a child process on a free port, with `tools` distinct tools registered (none when 0:
    a restart on the data folder of an earlier run)."""
    port = _free_port()
    env = {
        **os.environ,
        "TOOLSCOUT_DATA_DIR": str(data_dir),
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
        "TOOLSCOUT_EMBEDDING__MODELS_DIR": str(Settings().models_dir.resolve()),
        # wrk cycles the same queries at every concurrency: without this they would be embedded once and then
        # served from the query cache. Every request embeds its query here.
        "TOOLSCOUT_EMBEDDING__CACHE_SIZE": "0",
    }
    command = [
        sys.executable,
        "-c",
        "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))",
        "serve",
        "--port",
        str(port),
    ]
    errors = tempfile.TemporaryFile()  # the server's stderr: what to say when it does not start
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(process, url, READY_TIMEOUT_SECONDS)
    except ServerNotReady as exc:
        stop_server(process)
        errors.seek(0)
        said = [line.strip() for line in errors.read().decode(errors="replace").splitlines() if line.strip()]
        raise ServerNotReady(": ".join([str(exc), " | ".join(said[-2:])]) if said else str(exc)) from None
    finally:
        errors.close()
    catalog = build_catalog(source_tools(), tools) if tools else []
    with httpx.Client(base_url=url, timeout=3600) as client:
        for offset in range(0, len(catalog), POST_BATCH):
            client.post("/tools", json={"tools": catalog[offset : offset + POST_BATCH]}).raise_for_status()
    return process, url


def wrk_missing() -> bool:
    """Whether wrk is missing (said on stderr)."""
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install wrk, or scripts/install-test-extras.sh)", file=sys.stderr)
        return True
    return False


def stop_server(process: subprocess.Popen[bytes]) -> str | None:
    """Stop a started server; what went wrong, if it had to be killed."""
    process.terminate()
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return "killed after 120 s"
    return None


def run(args: argparse.Namespace) -> int:
    if wrk_missing():
        return 2
    try:
        return _run(args)
    except ServerNotReady as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    kinds = {kind: bench_queries(kind, args.queries) for kind in ("short", "long")}
    result: dict[str, Any] = {"floor_ms": {kind: embedding_floor_ms(floor_sample(q)) for kind, q in kinds.items()}}
    with tempfile.TemporaryDirectory(prefix="toolscout-load-") as tmp:
        process = None
        url = args.url
        if url is None:
            # Indexing and serving apart: the peak of the process that indexed, then a restart on its data
            # folder, whose peak is the memory of serving that catalog (start-up and the load below).
            indexer, _ = start_server(args.tools, Path(tmp))
            result["indexing_peak_rss_mb"] = peak_rss_mb(indexer.pid)
            stop_server(indexer)
            process, url = start_server(0, Path(tmp))
            result["tools"] = args.tools
            result["first_search"] = first_search(url, kinds["short"])
        try:
            for kind, queries in kinds.items():
                wrk_run(url, queries[:50], 4, 2, Path(tmp))  # warm the connection pool and caches of nothing
                result[kind] = [wrk_run(url, queries, int(c), args.duration, Path(tmp)) for c in args.concurrency]
            if process is not None:
                result["server_peak_rss_mb"] = peak_rss_mb(process.pid)
        finally:
            if process is not None and (problem := stop_server(process)):
                result["server_stop"] = problem
    _print(result)
    _say_errors(result)
    save_report(args.json_out, result)
    return 0


def _say_errors(result: dict[str, Any]) -> None:
    """Errors answer fast and pull the latencies down: a rate-limited server (--url, the API's default 600 a
    minute) once printed 2,356 errors of 2,365 requests a second as its figures, without a word."""
    rows = [row for kind in ("short", "long") for row in result[kind]]
    errors, requests = sum(r["errors"] for r in rows), sum(r["requests"] for r in rows)
    if errors:
        print(
            f"note: {errors:,} of {requests:,} requests failed (non-2xx answers or socket errors) and their latencies "
            "are in the figures; against a running server (--url), serve it with "
            "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE=0, or leave out --url to start one",
            file=sys.stderr,
        )


def _print(result: dict[str, Any]) -> None:
    print(
        f"floor (one embedding): short {result['floor_ms']['short']} ms, long {result['floor_ms']['long']} ms; "
        f"server peak RSS {result.get('server_peak_rss_mb', '?')} MB serving "
        f"({result.get('indexing_peak_rss_mb', '?')} MB in the process that indexed the catalog)"
    )
    if first := result.get("first_search"):
        print(
            f"first search after ready: {first['first_ms']} ms, the median of the next {FIRST_SEARCH_FOLLOWING} "
            f"{first['following_p50_ms']} ms: {first['ratio']} x"
        )
    print(f"{'kind':>6} {'conc':>5} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for kind in ("short", "long"):
        for row in result[kind]:
            print(
                f"{kind:>6} {row['concurrency']:>5} {row['requests_per_s']:>8} {row['p50_ms']:>8} "
                f"{row['p95_ms']:>8} {row['p99_ms']:>8} {row['errors']:>7}"
            )
