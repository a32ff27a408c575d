"""`toolscout bench search`: index build speed, no-change re-index, search latency in-process and over HTTP,
peak memory, for catalogs of several sizes built from real tool texts."""

from __future__ import annotations

import argparse
import json
import resource
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from service.catalog.files import demo_catalog, load_catalog_file
from service.http_transport import nodelay_transport
from service.settings import Settings
from service.usage.rollups import percentile

DEFAULT_SOURCE = Path(__file__).resolve().parents[2].parent / "shared" / "eval" / "sealtools" / "catalog.jsonl"
DEFAULT_QUERIES = DEFAULT_SOURCE.with_name("queries.jsonl")


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("search", help="index and search latency at several catalog sizes")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--source", type=Path, default=None, help="catalog with real tool texts (JSONL or tools/list)")
    parser.add_argument("--queries", type=Path, default=None, help="JSONL queries ({query}) to time")
    parser.add_argument("--searches", type=int, default=300, help="searches timed per size")
    parser.add_argument("--backend", choices=["edge", "qdrant"], default="edge")
    parser.add_argument("--json", type=Path, default=None, dest="json_out")
    parser.set_defaults(func=run)


def _source_tools(path: Path | None) -> list[dict[str, Any]]:
    if path is not None:
        return load_catalog_file(path).tools
    if DEFAULT_SOURCE.is_file():
        return load_catalog_file(DEFAULT_SOURCE).tools
    return demo_catalog()


def _queries(path: Path | None, tools: list[dict[str, Any]]) -> list[str]:
    path = path or (DEFAULT_QUERIES if DEFAULT_QUERIES.is_file() else None)
    if path is not None:
        return [json.loads(line)["query"] for line in path.read_text().splitlines() if line.strip()]
    return [" ".join(str(t.get("description", t["name"])).split()[:10]) for t in tools]


def build_catalog(source: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """`size` tools cycling through the real ones; each replica is a distinct server and text."""
    tools = []
    for i in range(size):
        base = source[i % len(source)]
        replica = i // len(source)
        server = str(base.get("server", "bench"))
        tools.append({
            **base,
            "server": server if replica == 0 else f"{server}-r{replica}",
            "description": f"{base.get('description', '')} (v{replica})" if replica else base.get("description", ""),
        })
    return tools


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure_size(size: int, source: list[dict[str, Any]], queries: list[str], searches: int,
                  backend: str) -> dict[str, Any]:
    import uvicorn

    from service.main import create_app

    with tempfile.TemporaryDirectory(prefix="toolscout-bench-") as tmp:
        settings = Settings(data_dir=Path(tmp), demo_catalog=False)
        settings.policy.rate_limit_per_minute = 0  # the benchmark is one caller firing as fast as it can
        settings.execution.demo_servers = False
        settings.index.backend = backend  # type: ignore[assignment]
        if backend == "qdrant":
            settings.index.url = ":memory:"
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        catalog = build_catalog(source, size)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=3600, transport=nodelay_transport()) as client:
            started = time.perf_counter()
            for offset in range(0, size, 5000):
                client.post("/tools", json={"tools": catalog[offset : offset + 5000]}).raise_for_status()
            index_seconds = time.perf_counter() - started
            started = time.perf_counter()
            for offset in range(0, size, 5000):
                body = client.post("/tools", json={"tools": catalog[offset : offset + 5000]}).json()
                assert body["created"] == body["updated"] == 0, body
            reindex_seconds = time.perf_counter() - started
            client.post("/search", json={"query": "warm up the model"})
            in_process: list[float] = []
            over_http: list[float] = []
            for query in queries[:searches]:
                t0 = time.perf_counter()
                response = client.post("/search", json={"query": query, "k": 5})
                response.raise_for_status()
                body = response.json()
                over_http.append((time.perf_counter() - t0) * 1000)
                in_process.append(body["latency_ms"])
        server.should_exit = True
        thread.join(timeout=30)
    return {
        "tools": size,
        "index_seconds": round(index_seconds, 2),
        "index_tools_per_s": round(size / index_seconds, 1),
        "reindex_unchanged_seconds": round(reindex_seconds, 3),
        "search_ms": {"p50": round(percentile(in_process, 0.5), 2), "p99": round(percentile(in_process, 0.99), 2)},
        "http_search_ms": {"p50": round(percentile(over_http, 0.5), 2), "p99": round(percentile(over_http, 0.99), 2)},
        "searches": len(over_http),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def run(args: argparse.Namespace) -> int:
    source = _source_tools(args.source)
    queries = _queries(args.queries, source)
    rows = []
    print(f"{'tools':>8} {'index s':>9} {'tools/s':>9} {'re-index s':>11} {'search p50':>11} {'p99':>8} "
          f"{'HTTP p50':>9} {'p99':>8} {'peak RSS MB':>12}")
    for size in (int(s) for s in args.sizes.split(",")):
        row = _measure_size(size, source, queries, args.searches, args.backend)
        rows.append(row)
        print(f"{row['tools']:>8} {row['index_seconds']:>9} {row['index_tools_per_s']:>9} "
              f"{row['reindex_unchanged_seconds']:>11} {row['search_ms']['p50']:>11} {row['search_ms']['p99']:>8} "
              f"{row['http_search_ms']['p50']:>9} {row['http_search_ms']['p99']:>8} {row['peak_rss_mb']:>12}",
              flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"backend": args.backend, "sizes": rows}, indent=2))
    return 0
