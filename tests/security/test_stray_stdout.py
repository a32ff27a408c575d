"""A stdio server's stray stdout (its own debug lines, or a flood of them) costs the service's log a few warnings a
minute, not two per line: 300,000 printed lines were 26 MB of log in 20 s, 570 bytes a line, on a live service."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from service.upstream.stray_lines import StrayLines
from tests.security.conftest import make_settings, running, servers_file
from tests.security.scripted_servers import scripted_entry

PLAIN_LINES = 20_000
BRACED_LINES = 500  # `{...` lines that are no JSON: parsed before they are known to be stray
NOISY_SERVER = """
plain, braced = int(sys.argv[1]), int(sys.argv[2])
tools = [{"name": "noisy", "description": "Prints debug lines, then answers.", "inputSchema": {"type": "object"}}]
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        with lock:
            for i in range(plain):
                sys.stdout.write("debug: loading module %d of the server\\n" % i)
            for i in range(braced):
                sys.stdout.write("{debug %d}\\n" % i)
            sys.stdout.flush()
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "done"}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
serve("noisy", handle)
"""


def stray_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name.startswith("service.upstream") and r.levelno >= logging.WARNING and "noisy" in r.name + r.getMessage()
    ]


async def test_a_server_printing_thousands_of_lines_on_stdout_costs_the_log_a_few_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    entry = scripted_entry(tmp_path, "noisy", NOISY_SERVER, str(PLAIN_LINES), str(BRACED_LINES))
    execution = {"servers_file": servers_file(tmp_path, {"noisy": entry}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (_app, http):
        started = time.perf_counter()
        answer = await http.post("/execute", json={"name": "noisy__noisy", "arguments": {}})
        elapsed = time.perf_counter() - started
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "ok" and answer.json()["content"][0]["text"] == "done"
        again = await http.post("/execute", json={"name": "noisy__noisy", "arguments": {}})
        assert again.json()["status"] == "ok"
        during = stray_records(caplog)
    lines = PLAIN_LINES + BRACED_LINES
    print(f"first call, {lines} stray lines before its answer: {elapsed:.2f} s; {len(during)} warnings for both calls")
    # Before: two warnings a line, 82,000 here. Now the first 5 lines of the minute, each told by the transport and
    # by the session.
    assert len([r for r in during if "not a JSON-RPC message on stdout" in r.getMessage()]) == 5
    assert len(during) <= 10, [r.getMessage()[:120] for r in during]
    said = [r.getMessage() for r in stray_records(caplog) if "were not logged" in r.getMessage()]
    left_out = 2 * (PLAIN_LINES + BRACED_LINES) - 5
    assert said == [f"{left_out} more lines on stdout that are not JSON-RPC were not logged"]


def test_each_window_logs_its_first_lines_then_says_how_many_it_left_out() -> None:
    now = [0.0]
    strays = StrayLines(logged_per_window=2, window_seconds=60.0, clock=lambda: now[0])
    assert [strays.admit() for _ in range(4)] == [(True, 0), (True, 0), (False, 0), (False, 0)]
    now[0] = 59.9
    assert strays.admit() == (False, 0)
    now[0] = 60.0
    assert strays.admit() == (True, 3)  # the closed window left out three, said once
    assert strays.admit() == (True, 0)
    assert (strays.left_out, strays.total) == (0, 7)
