"""A client cannot keep `toolscout serve` from stopping: on SIGTERM the /events streams end, so the server stops
waiting for its connections and runs the lifespan's shutdown (which writes the logs held in memory). Before, one
open stream (any key may hold 16, and every MCP front end holds one) left the process in "Waiting for connections
to close" for as long as the client liked, until an orchestrator's SIGKILL lost what the shutdown would have
written. A real process on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.processes import free_port, stop_process, wait_for_port

REPO = Path(__file__).resolve().parents[2]


def test_an_open_event_stream_does_not_keep_a_stopping_service_running(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOOLSCOUT_DATA_DIR": str(tmp_path),
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
    }
    command = [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, process, 120, "toolscout serve", log)
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
            http.stream("GET", "/events") as stream,
        ):
            lines = stream.iter_lines()
            assert ": connected" in [next(lines), next(lines)]
            process.terminate()
            try:
                code: int | None = process.wait(30)
            except subprocess.TimeoutExpired:  # main: still waiting for the stream, for as long as it stays open
                code = None
            rest = list(lines) if code is not None else None  # the stream ended (heartbeats would keep it open)
    finally:
        stop_process(process)
    # uvicorn ends by raising the signal it caught again: -15 is its clean stop on SIGTERM
    assert code == -15, (code, log.read_text(errors="replace")[-600:])
    assert rest is not None and all(line == "" or line.startswith(":") for line in rest)
    assert "Application shutdown complete" in log.read_text(errors="replace")
