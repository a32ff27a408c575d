"""`toolscout serve` prints its address line once it listens (after the model load and warm-up, which take
seconds): a user or script that waits for the line is answered at once, with no retry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.processes import free_port, read_until, stop_process

REPO = Path(__file__).resolve().parents[2]


def test_the_address_line_comes_once_the_service_listens(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOOLSCOUT_DATA_DIR": str(tmp_path / "data"),
        "TOOLSCOUT_DEMO_CATALOG": "false",
    }
    command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port)]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        lines = read_until(process.stdout, "Toolscout on", 120, process)
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)  # once: refused if the line came early
        # Where the CLI of this folder finds it on another port than its default (service/cli/served_address.py).
        served = (tmp_path / "data" / "serve.url").read_text()
    finally:
        stop_process(process)
    assert served == f"http://127.0.0.1:{port}\n" and not (tmp_path / "data" / "serve.url").exists()
    assert lines[-1].startswith(f"Toolscout on http://127.0.0.1:{port}  (console at /console")
    assert answer.status_code == 200, answer.text
