"""Benchmarks behind `toolscout bench`: each prints a table and can write JSON."""

from __future__ import annotations

from service.errors import ToolscoutError


class BenchFailed(ToolscoutError):
    """A benchmark that cannot measure (a timed call failed, a data set is missing): `toolscout` says why on one
    line, exit status 1."""

    slug, title = "bench-failed", "Benchmark failed"


def expect(ok: bool, what: str) -> None:
    """Stop the benchmark with `what` unless ok (an assert would vanish under -O and print a traceback)."""
    if not ok:
        raise BenchFailed(what)
