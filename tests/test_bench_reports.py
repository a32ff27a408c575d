"""A benchmark's `--json PATH`: written into folders it makes, refused in one line where it cannot be written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.benchmarks import BenchFailed, save_report


def test_a_report_goes_into_folders_it_makes(tmp_path: Path) -> None:
    target = tmp_path / "runs" / "2026-12-07" / "load.json"
    save_report(target, {"p50_ms": 7.5, "query": "東京の時刻"})
    assert json.loads(target.read_text(encoding="utf-8")) == {"p50_ms": 7.5, "query": "東京の時刻"}
    assert target.read_text(encoding="utf-8").endswith("}\n")


def test_no_path_writes_nothing(tmp_path: Path) -> None:
    save_report(None, {"p50_ms": 7.5})
    assert list(tmp_path.iterdir()) == []


def test_a_path_below_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "results").write_text("not a folder")
    with pytest.raises(BenchFailed) as refused:
        save_report(tmp_path / "results" / "load.json", {"p50_ms": 7.5})
    assert refused.value.detail.startswith(f"{tmp_path / 'results' / 'load.json'}: cannot be written (")
    assert "\n" not in refused.value.detail
