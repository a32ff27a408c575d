"""The execution log loses nothing: batched writes, a database that fails at shutdown (rows spilled to a file
and replayed at the next start), and a row the database refuses on its own (set aside, the others written)."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database
from service.db.models import Execution, utcnow
from service.execution.log import ExecutionLog


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
    log = ExecutionLog(create_sessionmaker(engine), tmp_path / "spill.jsonl")
    await log.start()
    for _ in range(1234):
        log.record(make_row())
    assert await log.flush(30)
    assert log.written == 1234 and log.pending == 0 and log.spilled == 0
    await log.close()
    await engine.dispose()
    assert await count_rows(url) == 1234


async def test_rows_survive_a_database_that_is_down_at_shutdown(tmp_path: Path) -> None:
    good_url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(good_url)
    spill = tmp_path / "spill.jsonl"
    # A database without the executions table: every insert fails.
    broken = create_engine_for(f"sqlite:///{tmp_path / 'empty.db'}")
    log = ExecutionLog(create_sessionmaker(broken), spill)
    await log.start()
    rows = [make_row(search_id=f"s{i}") for i in range(25)]
    for row in rows:
        log.record(row)
    assert not await log.flush(0.3)  # cannot be written yet
    await log.close()
    await broken.dispose()
    assert log.spilled == 25
    spilled = [json.loads(line) for line in spill.read_text().splitlines()]
    assert [r["id"] for r in spilled] == [r["id"] for r in rows]

    good = create_engine_for(good_url)
    replay = ExecutionLog(create_sessionmaker(good), spill)
    await replay.start()  # replays the spill file first
    await replay.close()
    await good.dispose()
    assert not spill.exists()
    assert await count_rows(good_url) == 25


async def test_a_refused_row_is_set_aside_and_the_rest_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    spill = tmp_path / "spill.jsonl"
    log = ExecutionLog(create_sessionmaker(engine), spill)
    await log.start()
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
    await log.close()
    await engine.dispose()
    assert await count_rows(url) == 6
    assert [json.loads(line)["id"] for line in spill.read_text().splitlines()] == [refused["id"]]


async def test_a_row_recorded_after_close_goes_to_the_spill_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    spill = tmp_path / "spill.jsonl"
    log = ExecutionLog(create_sessionmaker(engine), spill)
    await log.start()
    await log.close()
    late = make_row(status="upstream_error")
    log.record(late)
    await engine.dispose()
    assert [json.loads(line)["id"] for line in spill.read_text().splitlines()] == [late["id"]]
