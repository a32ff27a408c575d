"""Where the benchmarks find the dev sets and the real catalogs: `shared/` beside the checkout (or beside the
folder of work trees), and what they say when it is not there."""

from __future__ import annotations

from pathlib import Path

from service.benchmarks import BenchFailed

_HERE = Path(__file__).resolve()
SHARED = next((p / "shared" for p in _HERE.parents if (p / "shared" / "eval").is_dir()), _HERE.parents[3] / "shared")
EVAL = SHARED / "eval"


def missing_shared(what: str, instead: str) -> str:
    """Why a benchmark has no data, and what to pass instead."""
    return (
        f"{what} not found: the benchmarks read shared/eval and shared/catalogs from the nearest folder above "
        f"{_HERE.parents[2]} that has them (none does); {instead}"
    )


def require_files(paths: list[Path], instead: str) -> None:
    """Stop the benchmark when any of these data files is missing."""
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise BenchFailed(missing_shared(", ".join(str(p) for p in missing), instead))
