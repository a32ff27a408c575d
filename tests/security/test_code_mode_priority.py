"""Code mode's engine runs behind the service's own work: a caller's scripts spend the CPU the service's requests
leave. At niceness 0 one dev key's three busy loops (`while (true) {}`, each for its whole budget) held every other
caller's searches about 4 times as long on a 2-core machine (a live service's /search p50 32 ms against 7 ms idle;
niced, 13 ms)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tests.security.conftest import bearer

WORKER = "code_mode/worker.py"


def engine_children() -> list[int]:
    """The pids of this process's code-mode engines (its children running worker.py)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parent = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "")
        if parent == str(os.getpid()) and WORKER in command:
            found.append(int(entry.name))
    return found


async def test_a_busy_script_runs_at_the_lowest_priority(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    busy = {"script": "let n = 0; while (true) { n++; }", "timeout_seconds": 3}
    run = asyncio.create_task(http.post("/run", json=busy, headers=bearer(dev)))
    seen: dict[int, int] = {}
    while not run.done():
        for pid in engine_children():
            try:
                seen[pid] = max(seen.get(pid, 0), os.getpriority(os.PRIO_PROCESS, pid))
            except ProcessLookupError:
                pass
        await asyncio.sleep(0.05)
    answer = (await run).json()
    assert answer["error"]["type"] == "timeout", answer
    assert seen, "no engine process was seen while the script ran"
    assert set(seen.values()) == {19}, seen  # code_mode.niceness, its default


async def test_the_configured_niceness_is_the_engines(tmp_path: Path) -> None:
    from tests.security.conftest import cli_key, make_settings, running

    settings = make_settings(tmp_path, code_mode={"niceness": 7})
    async with running(settings) as (app, http):
        key = await cli_key(app, "agent", ["dev"])
        busy = {"script": "while (true) {}", "timeout_seconds": 2}
        run = asyncio.create_task(http.post("/run", json=busy, headers=bearer(key)))
        seen: set[int] = set()
        while not run.done():
            for pid in engine_children():
                try:
                    seen.add(os.getpriority(os.PRIO_PROCESS, pid))
                except ProcessLookupError:
                    pass
            await asyncio.sleep(0.05)
        await run
    assert 7 in seen and seen <= {0, 7}, seen  # 0 only for the instant before the engine reads its configuration
