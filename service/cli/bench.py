"""`toolscout bench ...`: benchmarks that print numbers. Each benchmark lives in its own module with
`register_bench(bench_subparsers)`; list it in BENCH_MODULES."""

from __future__ import annotations

import argparse
import importlib

BENCH_MODULES = [
    "service.benchmarks.search",
    "service.cli.tokens_bench",
    "service.benchmarks.analytics",
    "service.cli.execute_bench",
    "service.benchmarks.learning",
    "service.benchmarks.durability",
    "service.benchmarks.embedder",
    "service.benchmarks.load",
    "service.benchmarks.scale",
]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = subparsers.add_parser("bench", help="run a benchmark and print its numbers")
    bench_subparsers = bench.add_subparsers(dest="bench", required=True)
    for name in BENCH_MODULES:
        importlib.import_module(name).register_bench(bench_subparsers)
