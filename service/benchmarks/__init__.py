"""Benchmarks behind `toolscout bench`: each prints a table and can write JSON."""

from __future__ import annotations

import json
from pathlib import Path

from service.errors import ToolscoutError


class BenchFailed(ToolscoutError):
    """A benchmark that cannot measure (a timed call failed, a data set is missing): `toolscout` says why on one
    line, exit status 1."""

    slug, title = "bench-failed", "Benchmark failed"


def expect(ok: bool, what: str) -> None:
    """Stop the benchmark with `what` unless ok (an assert would vanish under -O and print a traceback)."""
    if not ok:
        raise BenchFailed(what)


def save_report(path: Path | None, result: object) -> None:
    """Write a benchmark's result as JSON to `--json PATH` (nothing without one): see save_text."""
    if path is not None:
        save_text(path, json.dumps(result, indent=2, ensure_ascii=False) + "\n")


def save_text(path: Path, text: str) -> None:
    """Write a report to `path`, making its folder; a path that cannot be written stops with one line (the figures
    are printed before it: only the file is lost, where it was a traceback after the whole run)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BenchFailed(f"{path}: cannot be written ({exc.strerror or exc})") from None
