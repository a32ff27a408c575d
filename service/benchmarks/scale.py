"""`toolscout bench scale`: p50 at several catalog sizes, as ratios to the smallest, over real HTTP.

Each size's data folder is indexed once by a `toolscout serve` of its own (kept under --data-root, so a later
run reuses it), then the sizes are served in turn, round after round: a server restarted on each folder, wrk at
concurrency 1 for short and for long queries. This 2-core machine's speed moves by up to 2 x between minutes, so
only sizes served next to each other are compared: each round gives a ratio, and the run reports their median
next to the ratio of the medians."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from service.benchmarks import save_report
from service.benchmarks.arguments import positive_int, positive_ints
from service.benchmarks.load import ServerNotReady, start_server, stop_server, wrk_missing, wrk_run
from service.benchmarks.search import bench_queries, peak_rss_mb

KINDS = ("short", "long")
BUILT = "bench-scale.json"  # in a data folder: the size it was indexed with, and what indexing it cost


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("scale", help="measure search p50 at several catalog sizes in turn (wrk, c=1)")
    parser.add_argument(
        "--sizes",
        type=positive_ints,
        default="10000,100000",
        help="catalog sizes, the first is the reference (default 10000,100000)",
    )
    parser.add_argument("--rounds", type=positive_int, default=3, help="times every size is served (default 3)")
    parser.add_argument(
        "--duration", type=positive_int, default=10, help="seconds of wrk per size, kind and round (default 10)"
    )
    parser.add_argument(
        "--queries", type=positive_int, default=400, help="distinct queries cycled per kind (default 400)"
    )
    parser.add_argument(
        "--data-root", type=Path, default=None, help="keep each size's data folder here and reuse it (default: temp)"
    )
    parser.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    parser.set_defaults(func=run)


def prepared_folder(root: Path, size: int) -> tuple[Path, dict[str, Any]]:
    """The data folder of a catalog of `size` distinct tools, indexed now unless an earlier run did."""
    folder = root / f"tools-{size}"
    marker = folder / BUILT
    if marker.is_file():
        return folder, json.loads(marker.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    process, _ = start_server(size, folder)
    built = {"tools": size, "index_seconds": round(time.monotonic() - started, 1)}
    built["indexing_peak_rss_mb"] = peak_rss_mb(process.pid)
    stop_server(process)
    marker.write_text(json.dumps(built))
    return folder, built


def serve_once(folder: Path, queries: dict[str, list[str]], duration: int, workdir: Path) -> dict[str, Any]:
    """One server on the folder: wrk c=1 per kind; p50/p99 in ms and the server's peak RSS."""
    process, url = start_server(0, folder)
    try:
        out: dict[str, Any] = {}
        for kind, texts in queries.items():
            wrk_run(url, texts[:50], 4, 2, workdir)  # warm the connection pool and the server's caches of nothing
            out[kind] = wrk_run(url, texts, 1, duration, workdir)
        out["server_peak_rss_mb"] = peak_rss_mb(process.pid)
        return out
    finally:
        stop_server(process)


def ratios(p50s: dict[int, dict[str, list[float]]], reference: int) -> dict[int, dict[str, dict[str, Any]]]:
    """Per size and kind: each round's p50 over the reference size's p50 of the same round, their median, and
    the ratio of the two sizes' median p50s."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for size, kinds in p50s.items():
        out[size] = {}
        for kind, values in kinds.items():
            base = p50s[reference][kind]
            per_round = [round(v / b, 3) for v, b in zip(values, base, strict=True)]
            out[size][kind] = {
                "p50_ms": values,
                "per_round": per_round,
                "median_of_rounds": round(statistics.median(per_round), 3),
                "of_medians": round(statistics.median(values) / statistics.median(base), 3),
            }
    return out


def run(args: argparse.Namespace) -> int:
    if wrk_missing():
        return 2
    sizes = args.sizes
    if not sizes or any(s <= 0 for s in sizes) or args.rounds < 1:
        print("error: --sizes takes positive catalog sizes, --rounds at least 1", file=sys.stderr)
        return 2
    try:
        return _run(args, sizes)
    except (ServerNotReady, OSError) as exc:  # OSError: a --data-root that cannot hold the data folders
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, sizes: list[int]) -> int:
    queries = {kind: bench_queries(kind, args.queries) for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="toolscout-scale-") as tmp:
        root = args.data_root or Path(tmp)
        folders = {size: prepared_folder(root, size) for size in sizes}
        p50s: dict[int, dict[str, list[float]]] = {size: {kind: [] for kind in KINDS} for size in sizes}
        rss: dict[int, list[float]] = {size: [] for size in sizes}
        for round_number in range(1, args.rounds + 1):
            for size in sizes:
                served = serve_once(folders[size][0], queries, args.duration, Path(tmp))
                rss[size].append(served["server_peak_rss_mb"])
                for kind in KINDS:
                    p50s[size][kind].append(served[kind]["p50_ms"])
                    print(
                        f"round {round_number} {size:>7} tools {kind:>5}: p50 {served[kind]['p50_ms']} ms, "
                        f"p99 {served[kind]['p99_ms']} ms, {served[kind]['errors']} errors",
                        flush=True,
                    )
    result = {
        "sizes": {size: {**built, "serving_peak_rss_mb": max(rss[size])} for size, (_, built) in folders.items()},
        "ratios": ratios(p50s, sizes[0]),
    }
    _print(result, sizes)
    save_report(args.json_out, result)
    return 0


def _print(result: dict[str, Any], sizes: list[int]) -> None:
    for size in sizes:
        built = result["sizes"][size]
        print(
            f"{size} tools: indexed in {built['index_seconds']} s (peak RSS {built['indexing_peak_rss_mb']} MB), "
            f"serving peak RSS {built['serving_peak_rss_mb']} MB"
        )
    for size in sizes[1:]:
        for kind in KINDS:
            row = result["ratios"][size][kind]
            print(
                f"{kind:>5} {size} / {sizes[0]}: per round {row['per_round']}, median {row['median_of_rounds']} x "
                f"(of the median p50s: {row['of_medians']} x; p50s {row['p50_ms']} against "
                f"{result['ratios'][sizes[0]][kind]['p50_ms']} ms)"
            )
