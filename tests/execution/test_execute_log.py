"""The execution log loses nothing: batched writes, a database that fails at shutdown (rows spilled to a file
and replayed at the next start), a row the database refuses on its own (set aside, the others written);
commit mode answers once rows are committed (or fsync'd while the database is down); the spill file survives
torn lines and interrupted replays."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database
from service.db.models import Execution, utcnow
from service.execution.log import ExecutionLog
from service.supervisor import Supervisor


def make_row(**overrides: Any) -> dict[str, Any]:
    started = utcnow()
    row: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "caller": "local",
        "tool": "t__echo",
        "server_id": "t",
        "search_id": None,
        "arguments_digest": "0" * 64,
        "arguments": None,
        "status": "ok",
        "error_class": None,
        "error_detail": None,
        "duration_ms": 1.5,
        "input_tokens": 3,
        "output_tokens": 2,
        "result_id": None,
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=2),
    }
    row.update(overrides)
    return row


async def start(log: ExecutionLog, supervisor: Supervisor) -> None:
    """Replay, then run the writer as the service does."""
    await log.start()
    supervisor.start("execution-log", log.run)


async def close(log: ExecutionLog, supervisor: Supervisor) -> None:
    await log.close(supervisor.task("execution-log"))


async def count_rows(url: str) -> int:
    engine = create_engine_for(url)
    try:
        async with create_sessionmaker(engine)() as session:
            return int(await session.scalar(select(func.count()).select_from(Execution)) or 0)
    finally:
        await engine.dispose()


async def test_rows_are_written_in_batches_and_flush_waits_for_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    log = ExecutionLog(create_sessionmaker(engine), tmp_path / "spill.jsonl", "batched")
    supervisor = Supervisor()
    await start(log, supervisor)
    for _ in range(1234):
        log.record(make_row())
    assert await log.flush(30)
    assert log.written == 1234 and log.pending == 0 and log.spilled == 0
    await close(log, supervisor)
    await engine.dispose()
    assert await count_rows(url) == 1234


async def test_rows_survive_a_database_that_is_down_at_shutdown(tmp_path: Path) -> None:
    good_url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(good_url)
    spill = tmp_path / "spill.jsonl"
    # A database without the executions table: every insert fails.
    broken = create_engine_for(f"sqlite:///{tmp_path / 'empty.db'}")
    log = ExecutionLog(create_sessionmaker(broken), spill, "batched")
    supervisor = Supervisor()
    await start(log, supervisor)
    rows = [make_row(search_id=f"s{i}") for i in range(25)]
    for row in rows:
        log.record(row)
    assert await log.flush(5)  # not written: set aside in the spill file at once, as commit mode does
    assert log.written == 0
    await close(log, supervisor)
    await broken.dispose()
    assert log.spilled == 25
    spilled = [json.loads(line) for line in spill.read_text().splitlines()]
    assert [r["id"] for r in spilled] == [r["id"] for r in rows]

    good = create_engine_for(good_url)
    replay = ExecutionLog(create_sessionmaker(good), spill)
    await start(replay, supervisor)  # replays the spill file first
    await close(replay, supervisor)
    await good.dispose()
    assert not spill.exists()
    assert await count_rows(good_url) == 25


async def test_a_refused_row_is_set_aside_and_the_rest_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    spill = tmp_path / "spill.jsonl"
    log = ExecutionLog(create_sessionmaker(engine), spill, "batched")
    supervisor = Supervisor()
    await start(log, supervisor)
    duplicate = make_row()
    log.record(duplicate)
    assert await log.flush(10)
    # The same id again is refused by the primary key; it is already in the table, so nothing is lost.
    others = [make_row() for _ in range(5)]
    log.record(duplicate | {"status": "tool_error"})
    for row in others:
        log.record(row)
    # A row missing a NOT NULL value is refused on its own and kept in the spill file.
    refused = make_row(caller=None)
    log.record(refused)
    assert await log.flush(10)
    await close(log, supervisor)
    await engine.dispose()
    assert await count_rows(url) == 6
    assert [json.loads(line)["id"] for line in spill.read_text().splitlines()] == [refused["id"]]


async def test_a_row_recorded_after_close_goes_to_the_spill_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    spill = tmp_path / "spill.jsonl"
    log = ExecutionLog(create_sessionmaker(engine), spill, "batched")
    supervisor = Supervisor()
    await start(log, supervisor)
    await close(log, supervisor)
    late = make_row(status="upstream_error")
    log.record(late)
    await engine.dispose()
    assert [json.loads(line)["id"] for line in spill.read_text().splitlines()] == [late["id"]]


async def test_commit_mode_answers_once_the_row_is_committed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    log = ExecutionLog(create_sessionmaker(engine), tmp_path / "spill.jsonl", "commit")
    supervisor = Supervisor()
    await start(log, supervisor)
    waiters = [log.record(make_row()) for _ in range(300)]
    assert all(w is not None and not w.done() for w in waiters)
    await asyncio.wait_for(asyncio.gather(*[w for w in waiters if w is not None]), 30)
    # Every future is done only once its row is in the table; concurrent rows share batches (group commit).
    assert await count_rows(url) == 300
    assert log.written == 300 and 1 <= log.batches < 300
    one = log.record(make_row())
    assert one is not None
    await asyncio.wait_for(one, 10)
    assert await count_rows(url) == 301
    await close(log, supervisor)
    await engine.dispose()


async def test_commit_mode_spills_while_the_database_is_down_and_replays_when_it_is_back(tmp_path: Path) -> None:
    good_url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(good_url)
    good, broken = create_engine_for(good_url), create_engine_for(f"sqlite:///{tmp_path / 'empty.db'}")
    state = {"up": False}

    def sessions() -> Any:
        return create_sessionmaker(good if state["up"] else broken)()

    spill = tmp_path / "spill.jsonl"
    log = ExecutionLog(sessions, spill, "commit")
    supervisor = Supervisor()
    await start(log, supervisor)
    rows = [make_row() for _ in range(40)]
    waiters = [log.record(row) for row in rows]
    # Down: the calls are not held up; their rows are fsync'd to the spill file instead.
    await asyncio.wait_for(asyncio.gather(*[w for w in waiters if w is not None]), 5)
    assert log.spilled == 40
    assert sorted(json.loads(line)["id"] for line in spill.read_text().splitlines()) == sorted(r["id"] for r in rows)
    state["up"] = True
    await asyncio.sleep(0.5)  # past the first retry delay
    later = log.record(make_row())
    assert later is not None
    await asyncio.wait_for(later, 10)
    for _ in range(50):
        if await count_rows(good_url) == 41:
            break
        await asyncio.sleep(0.1)
    assert await count_rows(good_url) == 41  # the spilled rows were replayed after the first good write
    assert not spill.exists() and not spill.with_name(spill.name + ".replaying").exists()
    await close(log, supervisor)
    await good.dispose()
    await broken.dispose()


async def test_torn_lines_are_set_aside_and_an_interrupted_replay_is_finished(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    spill = tmp_path / "spill.jsonl"
    good_rows = [make_row() for _ in range(4)]
    lines = [json.dumps(r, default=str) for r in good_rows]
    # A torn middle line, garbage, and a torn last line without its newline (a crash mid-append).
    spill.write_text(f"{lines[0]}\n{lines[1][:30]}\n{{not json\n{lines[2]}\n{lines[3][:-5]}")
    # An earlier replay died after renaming its file: those rows (one already written) are replayed too.
    leftover = [make_row(), make_row()]
    spill.with_name(spill.name + ".replaying").write_text("".join(json.dumps(r, default=str) + "\n" for r in leftover))
    engine = create_engine_for(url)
    sessions = create_sessionmaker(engine)
    async with sessions() as session:
        session.add(Execution(**leftover[0]))
        await session.commit()
    log = ExecutionLog(sessions, spill, "commit")
    supervisor = Supervisor()
    await start(log, supervisor)
    await close(log, supervisor)
    await engine.dispose()
    assert await count_rows(url) == 4  # leftover x2, lines 0 and 2
    corrupt = spill.with_name(spill.name + ".corrupt").read_text().splitlines()
    assert len(corrupt) == 3 and corrupt[1] == "{not json"
    assert not spill.exists()


async def test_an_append_after_a_torn_last_line_starts_a_new_line(tmp_path: Path) -> None:
    from service.db.spill import SpillFile

    spill = SpillFile(tmp_path / "spill.jsonl")
    spill.path.write_text('{"id": "torn", "cal')
    row = make_row()
    spill.append([row])
    lines = spill.path.read_text().splitlines()
    assert lines[0] == '{"id": "torn", "cal' and json.loads(lines[1])["id"] == row["id"]
