"""`toolscout mcp --transport http` prints its address line once it listens: a client that waits for the line
connects and initializes at once, with no retry."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.mcp.conftest import HEADERS, INITIALIZE
from tests.processes import free_port, read_until, stop_process

REPO = Path(__file__).resolve().parents[2]


def test_the_address_line_comes_once_the_front_end_listens(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOOLSCOUT_DATA_DIR": str(tmp_path),
        "TOOLSCOUT_FRONTEND__API_URL": f"http://127.0.0.1:{free_port()}",  # nothing there: the line must not wait
    }
    command = [sys.executable, "-m", "service.cli", "mcp", "--transport", "http", "--port", str(port)]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        assert process.stderr is not None
        lines = read_until(process.stderr, "Toolscout MCP front end", 60, process)
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # once: refused if the line came early
            pass
        answer = httpx.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE, headers=HEADERS, timeout=30)
    finally:
        stop_process(process)
    assert lines[-1].strip().endswith(f"on http://127.0.0.1:{port}/mcp -> {env['TOOLSCOUT_FRONTEND__API_URL']}")
    assert answer.status_code == 200, answer.text
    body = answer.text if "json" in answer.headers["content-type"] else answer.text.split("data: ", 1)[1]
    assert json.loads(body)["result"]["serverInfo"]["name"]
