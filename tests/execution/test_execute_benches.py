"""`toolscout bench execute` and `bench durability` run end to end on the real time server (tiny sizes): both
called the app as host `bench`, which the Host check refuses, so both stopped at their first call. Their in-process
apps are keyless by design: no "No API key configured" warning lands in the middle of their tables."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from service.cli import main


def keyless_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings of a start-up without keys that the bench's apps logged."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "No API key" in r.getMessage()]


def test_bench_execute_prints_each_in_process_path(
    python_servers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    out = tmp_path / "execute.json"
    argv = ["bench", "execute", "--calls", "3", "--warmup", "1", "--throughput-calls", "4", "--concurrency", "2"]
    assert main([*argv, "--no-http", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert list(result["latency"]) == ["direct", "function", "asgi"]
    assert all(result["throughput"][path]["calls"] == 4 for path in ("direct", "function", "asgi"))
    assert "| asgi |" in capsys.readouterr().out
    assert keyless_warnings(caplog) == []


def test_bench_durability_prints_both_log_modes(
    python_servers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    out = tmp_path / "durability.json"
    argv = ["bench", "durability", "--calls", "3", "--warmup", "1", "--repeats", "1", "--throughput-calls", "4"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| /execute, commit |" in printed and "| /execute, batched |" in printed
    assert json.loads(out.read_text())["repeats"] == 1
    assert keyless_warnings(caplog) == []
