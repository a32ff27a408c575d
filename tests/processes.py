"""Ports and child processes of the tests: a free loopback port, waiting until a child accepts connections on one,
and stopping a child (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import selectors
import socket
import subprocess
import time
from pathlib import Path
from typing import IO


def free_port() -> int:
    """A loopback port nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accepts(port: int) -> bool:
    """Whether something accepts connections on this loopback port (a connection only: an HTTP probe could count
    as a request, e.g. a failed authentication)."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_for_port(
    port: int,
    process: subprocess.Popen[bytes] | None = None,
    seconds: float = 20.0,
    what: str = "the child process",
    log: Path | None = None,
) -> None:
    """Wait until `port` accepts connections; fail at once if `process` exits (with its log's end), else after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while not accepts(port):
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} exited with {process.returncode} before listening on {port}\n{tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not listen on {port} within {seconds:g} s")
        time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes], grace_seconds: float = 30.0) -> None:
    """SIGTERM, and SIGKILL if it is still running after the grace period."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def read_until(stream: IO[bytes], marker: str, seconds: float, process: subprocess.Popen[bytes]) -> list[str]:
    """A child's lines on `stream` (its stdout or stderr pipe) up to and including the first holding `marker`."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            line = stream.readline().decode(errors="replace")
            if not line:
                break
            lines.append(line)
            if marker in line:
                return lines
    raise AssertionError(f"no line with {marker!r} within {seconds:g} s (exit {process.poll()}): {lines}")
