"""`toolscout bench search`: index build speed, no-change re-index, search latency over HTTP for short
(MetaTool) and long multi-intent (Seal-Tools) queries next to the embedding floor of the same run, and peak
memory, for catalogs of several sizes of distinct real tool texts; each size in its own process."""

from __future__ import annotations

import argparse
import json
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from indexer.documents import build_document
from indexer.index.base import DENSE_FIELDS
from indexer.tools import validate_batch
from service.benchmarks import BenchFailed, save_report
from service.benchmarks.arguments import positive_int, positive_ints
from service.benchmarks.datasets import SHARED, missing_shared
from service.catalog.files import demo_catalog, load_catalog_file
from service.http_transport import nodelay_transport
from service.settings import Settings
from service.usage.rollups import percentile

# The real tools: Seal-Tools and MetaTool (the dev sets) and the eight catalogs of real MCP servers.
DEFAULT_SOURCES = [
    SHARED / "eval" / "sealtools" / "catalog.jsonl",
    SHARED / "eval" / "metatool" / "catalog.jsonl",
    *sorted((SHARED / "catalogs").glob("*.json")),
]
DEFAULT_QUERIES = {
    "short": SHARED / "eval" / "metatool" / "queries.jsonl",
    "long": SHARED / "eval" / "sealtools" / "queries.jsonl",
}
POST_BATCH = 5000


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("search", help="time indexing and search at several catalog sizes")
    parser.add_argument(
        "--sizes", type=positive_ints, default="1000,10000,100000", help="catalog sizes (default 1000,10000,100000)"
    )
    parser.add_argument(
        "--source",
        type=Path,
        action="append",
        default=None,
        help="catalog with real tool texts (JSONL or tools/list; repeatable)",
    )
    parser.add_argument(
        "--searches", type=positive_int, default=300, help="searches timed per size and query kind (default 300)"
    )
    parser.add_argument(
        "--backend",
        choices=["edge", "qdrant"],
        default="edge",
        help="edge: in-process; qdrant: qdrant-client :memory: (default edge)",
    )
    parser.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    parser.set_defaults(func=run)


def source_tools(paths: list[Path] | None = None) -> list[dict[str, Any]]:
    """The real tools the catalogs are built from, each distinct qualified name once."""
    tools: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths or [p for p in DEFAULT_SOURCES if p.is_file()]:
        server = None if path.suffix == ".jsonl" else path.stem
        for tool in load_catalog_file(path, server).tools:
            tools.setdefault((str(tool.get("server", server or "bench")), str(tool["name"])), tool)
    if tools:
        return list(tools.values())
    print(
        "note: "
        + missing_shared(
            "the real tools",
            "measuring the 85 demo tools instead: not comparable with the "
            "README's figures (--source FILE names a catalog)",
        ),
        file=sys.stderr,
    )
    return demo_catalog()


def bench_queries(kind: str, limit: int) -> list[str]:
    """The first `limit` distinct queries of a kind: short, MetaTool's; long, Seal-Tools' requests of several
    tools (its file opens with 200 single-tool requests of 21 tokens on average; the 1,560 multi-tool ones average 92
    and split into 4.6 parts)."""
    path = DEFAULT_QUERIES[kind]
    if not path.is_file():
        print(f"note: {missing_shared(str(path), f'timing 2 {kind} queries instead')}", file=sys.stderr)
        return ["search the web for news", "read a file and send its summary by email"][: max(1, limit)]
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    texts = [row["query"] for row in rows if kind == "short" or len(row.get("relevant", ())) > 1]
    return list(dict.fromkeys(texts))[:limit]


def floor_sample(queries: list[str], count: int = 200) -> list[str]:
    """`count` of the queries spread over the whole list, for the embedding floor of a run that cycles them."""
    step = max(1, len(queries) // count)
    return queries[::step][:count]


def _mix(base: dict[str, Any], donor: dict[str, Any], replica: int) -> dict[str, Any]:
    """A new tool from two real ones, as long as a real one: base's name with a word of the donor's, the first
    half of base's description followed by the second half of the donor's, and base's parameters with its last
    one swapped for the donor's first. Deterministic, and distinct in every embedded field."""
    donor_words = str(donor["name"]).replace("-", "_").split("_")
    head = str(base.get("description", "")).split()
    tail = str(donor.get("description", "")).split()
    description = " ".join(head[: max(1, len(head) // 2)] + tail[len(tail) // 2 :])
    schema = dict(base.get("input_schema") or {"type": "object", "properties": {}})
    properties = dict(schema.get("properties") or {})
    donor_properties = list(((donor.get("input_schema") or {}).get("properties") or {}).items())
    if donor_properties:
        if properties:
            properties.pop(list(properties)[-1])
        key, value = donor_properties[0]
        properties.setdefault(f"{key}_{donor_words[0].lower()}", value)
    schema.pop("required", None)  # the swapped parameter may have been required
    return {
        **base,
        "server": f"{base.get('server', 'bench')}-r{replica}",
        "name": f"{base['name']}_{donor_words[0]}",
        "description": description,
        "input_schema": {**schema, "type": "object", "properties": properties},
    }


def build_catalog(source: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """`size` tools: the real ones first, then deterministic mixes of two real tools (distinct texts)."""
    tools = [dict(tool) for tool in source[:size]]
    count = len(source)
    for i in range(len(tools), size):
        replica, position = divmod(i, count)
        donor = source[(position * 7919 + replica * 104729 + 1) % count]
        if donor is source[position]:
            donor = source[(position + 1) % count]
        tools.append(_mix(source[position], donor, replica))
    return tools


def distinct_texts(catalog: list[dict[str, Any]]) -> int:
    """How many distinct field texts the catalog's tools embed."""
    texts = set()
    for tool in validate_batch(catalog).tools:
        document = build_document(tool)
        texts.update(getattr(document, field) for field in DENSE_FIELDS)
    return len(texts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss_mb(pid: int | str = "self") -> float:
    """A process's peak RSS (VmHWM: unlike ru_maxrss it does not carry over exec from the parent)."""
    status = Path(f"/proc/{pid}/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1) if pid == "self" else 0.0


def _timed_posts(client: httpx.Client, queries: list[str]) -> tuple[list[float], list[float]]:
    """HTTP round trip and in-service latency (ms) of one search per query."""
    over_http: list[float] = []
    in_service: list[float] = []
    for query in queries:
        started = time.perf_counter()
        response = client.post("/search", json={"query": query, "k": 5})
        response.raise_for_status()
        over_http.append((time.perf_counter() - started) * 1000)
        in_service.append(response.json()["latency_ms"])
    return over_http, in_service


def embedding_median_ms(embedder: Any, queries: list[str]) -> float:
    """Median ms of one query embedding alone (the floor a search is read against), by an uncached embedder."""
    samples = []
    for query in queries:
        started = time.perf_counter()
        embedder.embed([query])
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 2)


def _ms(values: list[float]) -> dict[str, float]:
    return {name: round(percentile(values, q), 2) for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}


def _index_catalog(client: httpx.Client, catalog: list[dict[str, Any]]) -> tuple[float, float]:
    """Seconds of the full index and of the no-change re-index of the same catalog."""
    started = time.perf_counter()
    for offset in range(0, len(catalog), POST_BATCH):
        client.post("/tools", json={"tools": catalog[offset : offset + POST_BATCH]}).raise_for_status()
    index_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for offset in range(0, len(catalog), POST_BATCH):
        body = client.post("/tools", json={"tools": catalog[offset : offset + POST_BATCH]}).json()
        assert body["created"] == body["updated"] == 0, body
    return index_seconds, time.perf_counter() - started


def measure_size(size: int, source: list[dict[str, Any]], searches: int, backend: str) -> dict[str, Any]:
    """One catalog size, served in a thread of this process: index, re-index, searches, floor, peak RSS."""
    import uvicorn

    from service.main import create_app

    catalog = build_catalog(source, size)
    with tempfile.TemporaryDirectory(prefix="toolscout-bench-") as tmp:
        settings = Settings(data_dir=Path(tmp), demo_catalog=False)
        settings.embedding.models_dir = Settings().models_dir.resolve()  # reuse the exported model
        settings.policy.rate_limit_per_minute = 0  # the benchmark is one caller firing as fast as it can
        settings.execution.demo_servers = False
        settings.index.backend = backend  # type: ignore[assignment]
        if backend == "qdrant":
            settings.index.url = ":memory:"
        app = create_app(settings, keyless_by_design=True)
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        row: dict[str, Any] = {"tools": size, "distinct_texts": distinct_texts(catalog)}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=3600, transport=nodelay_transport()) as client:
            index_seconds, reindex_seconds = _index_catalog(client, catalog)
            row.update(
                index_seconds=round(index_seconds, 2),
                index_tools_per_s=round(size / index_seconds, 1),
                reindex_unchanged_seconds=round(reindex_seconds, 3),
            )
            for kind in ("short", "long"):
                queries = bench_queries(kind, searches)
                over_http, in_service = _timed_posts(client, queries)
                row[kind] = {
                    "http_ms": _ms(over_http),
                    "service_ms": _ms(in_service),
                    "floor_ms": embedding_median_ms(app.state.resources.embedder.inner, floor_sample(queries, 100)),
                    "searches": len(queries),
                }
        server.should_exit = True
        thread.join(timeout=30)
    row["peak_rss_mb"] = peak_rss_mb()
    return row


def _in_own_process(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run one size in a child process, so its peak RSS is its own."""
    with tempfile.TemporaryDirectory(prefix="toolscout-bench-") as tmp:
        out = Path(tmp) / "row.json"
        command = [
            sys.executable,
            "-c",
            "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))",
            "bench",
            "search",
            "--sizes",
            str(size),
            "--searches",
            str(args.searches),
            "--backend",
            args.backend,
            "--json",
            str(out),
        ]
        for path in args.source or []:
            command += ["--source", str(path)]
        code = subprocess.run(command, check=False, stdout=subprocess.DEVNULL).returncode
        if code != 0:  # the child said why on stderr, above
            raise BenchFailed(f"the run of {size:,} tools stopped with exit status {code}")
        return json.loads(out.read_text())["sizes"][0]  # type: ignore[no-any-return]


def _print_row(row: dict[str, Any]) -> None:
    short, long = row["short"], row["long"]
    print(
        f"{row['tools']:>7} {row['distinct_texts']:>8} {row['index_seconds']:>8} {row['index_tools_per_s']:>8} "
        f"{row['reindex_unchanged_seconds']:>8} | {short['floor_ms']:>6} {short['http_ms']['p50']:>6} "
        f"{short['http_ms']['p99']:>6} | {long['floor_ms']:>6} {long['http_ms']['p50']:>6} "
        f"{long['http_ms']['p99']:>6} | {row['peak_rss_mb']:>7}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    sizes = args.sizes
    print(
        f"{'tools':>7} {'texts':>8} {'index s':>8} {'tools/s':>8} {'re-idx s':>8} | {'floor':>6} {'short':>6} "
        f"{'p99':>6} | {'floor':>6} {'long':>6} {'p99':>6} | {'RSS MB':>7}   (HTTP ms; floor = one embedding)"
    )
    rows = []
    for size in sizes:
        if len(sizes) > 1:
            row = _in_own_process(size, args)
        else:
            row = measure_size(size, source_tools(args.source), args.searches, args.backend)
        rows.append(row)
        _print_row(row)
    save_report(args.json_out, {"backend": args.backend, "sizes": rows})
    return 0
