"""Spill files in a folder the replicas share (`db.spill_dir`): a replica replays the files of replicas that are
gone, never one a live replica holds. Before, a replica recreated with an empty data folder during a database outage
lost what it had spilled (56 answered calls in the chaos run of tests/cluster/test_replica_failures.py): no start
ever replayed its file. A real process holds its file's lock and is killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database
from service.db.spill import SpillFile, spill_location
from service.execution.log import ExecutionLog
from service.supervisor import Supervisor
from tests.execution.test_execute_log import close, count_rows, make_row, start
from tests.processes import read_until

REPO = Path(__file__).resolve().parents[2]


def spilling_replica(folder: Path, ids: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
    """A process that spills rows to the shared folder, then lives on (holding its file's lock)."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from service.db.spill import SpillFile
        spill = SpillFile(Path({str(folder / "executions-spill.jsonl")!r}), shared=True)
        spill.append([{{"id": i}} for i in {ids!r}])
        print(spill.path, flush=True)
        time.sleep(600)
        """
    )
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, env=environment)
    assert process.stdout is not None
    line = read_until(process.stdout, ".jsonl", 30, process)[-1]
    return process, Path(line.strip())


async def replayed_by_a_new_replica(folder: Path) -> list[str]:
    seen: list[str] = []

    async def insert(rows: list[dict[str, Any]]) -> None:
        seen.extend(row["id"] for row in rows)

    replica = SpillFile(folder / "executions-spill.jsonl", shared=True)
    await replica.replay(insert)
    replica.close()
    return seen


async def test_a_replica_replays_the_file_of_one_that_is_gone_and_not_of_one_that_lives(tmp_path: Path) -> None:
    living, living_file = spilling_replica(tmp_path, ["a1", "a2"])
    dead, dead_file = spilling_replica(tmp_path, ["b1", "b2", "b3"])
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        assert await replayed_by_a_new_replica(tmp_path) == ["b1", "b2", "b3"]
        assert not dead_file.exists() and living_file.exists()
        assert await replayed_by_a_new_replica(tmp_path) == []  # claimed once
        living.send_signal(signal.SIGKILL)
        living.wait(10)
        assert await replayed_by_a_new_replica(tmp_path) == ["a1", "a2"]
    finally:
        for process in (living, dead):
            if process.poll() is None:
                process.kill()
                process.wait(10)
    assert os.listdir(tmp_path) == []  # nor the lock files of replicas that are gone


def test_without_a_shared_folder_the_data_folder_keeps_its_one_file(tmp_path: Path) -> None:
    assert spill_location(tmp_path / "data", None, "executions-spill.jsonl") == (
        tmp_path / "data" / "executions-spill.jsonl", False)
    assert spill_location(tmp_path / "data", tmp_path / "shared", "x.jsonl") == (tmp_path / "shared" / "x.jsonl", True)
    spill = SpillFile(tmp_path / "executions-spill.jsonl")
    assert spill.path == tmp_path / "executions-spill.jsonl" and not spill.shared


async def test_the_execution_log_of_a_new_replica_writes_what_a_recreated_one_spilled(tmp_path: Path) -> None:
    """The chaos run's loss, in one process: a replica's log spills at shutdown with the database down, the
    replica is gone (its lock let go, as its process's end does), and a replica with another data folder and the
    same shared folder writes those rows at its start."""
    shared = tmp_path / "shared"
    good_url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(good_url)
    broken = create_engine_for(f"sqlite:///{tmp_path / 'empty.db'}")  # no executions table: every insert fails
    supervisor = Supervisor()
    gone = ExecutionLog(create_sessionmaker(broken), shared / "executions-spill.jsonl", "batched", shared_spill=True)
    await start(gone, supervisor)
    rows = [make_row() for _ in range(25)]
    for row in rows:
        gone.record(row)
    await close(gone, supervisor)
    await broken.dispose()
    assert gone.spilled == 25 and gone.spill_path.parent == shared
    assert [json.loads(line)["id"] for line in gone.spill_path.read_text().splitlines()] == [r["id"] for r in rows]
    gone.spill.close()

    good = create_engine_for(good_url)
    new = ExecutionLog(create_sessionmaker(good), shared / "executions-spill.jsonl", shared_spill=True)
    assert new.spill_path != gone.spill_path
    await start(new, supervisor)
    await close(new, supervisor)
    await good.dispose()
    assert await count_rows(good_url) == 25
    assert not gone.spill_path.exists()
