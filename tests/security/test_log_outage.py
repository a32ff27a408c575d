"""The logs written in batches hold a bounded amount in memory while PostgreSQL is down.

Before, both writers kept every row until the database came back: 31,000 searches and as many calls (execution log
in "batched" durability) in 10 s with the database refusing connections were all held, 124 MB of Python objects,
growing for as long as the outage lasted. Now the search log holds its oldest `logs.max_pending_searches` rows and
drops (and counts, in /metrics and in one warning line) the searches past them, and writes what it held once the
database is back; the execution log sets its batches aside in its spill file in both durabilities, as commit mode
did, and writes them once the database is back."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import anyio
import httpx
import pytest
from sqlalchemy import func, select

from indexer.embedding import HashingEmbedder
from service.db.engine import create_engine_for, create_sessionmaker
from service.db.models import Execution, Search, utcnow
from service.execution.log import ExecutionLog
from service.main import create_app
from service.search.log import SearchLog
from service.settings import Settings
from tests.conftest import make_settings
from tests.database_link import DatabaseLink
from tests.execution.test_execute_log import make_row

pytestmark = pytest.mark.postgres


async def count(url: str, table: type) -> int:
    engine = create_engine_for(url, timeout_seconds=5)
    try:
        async with create_sessionmaker(engine)() as session:
            return int(await session.scalar(select(func.count()).select_from(table)) or 0)
    finally:
        await engine.dispose()


async def wait_for(condition: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not reached in time"
        await anyio.sleep(0.1)


def search_row(query: str) -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "caller": "local",
        "query": query,
        "k": 3,
        "results": [{"name": "mail__send_email", "score": 0.5}],
        "result_count": 1,
        "latency_ms": 1.0,
        "created_at": utcnow(),
    }


def outage_settings(tmp_path: Path, url: str) -> Settings:
    return make_settings(
        tmp_path,
        db={"url": url, "timeout_seconds": 1.0},
        logs={"max_pending_searches": 40},
        # The open caller is known without the database, and 100 searches in a second are within its rate limit.
        policy={"key_cache_seconds": 600.0, "rate_limit_burst": 1000, "rate_limit_per_minute": 60_000},
    )


async def test_searches_during_an_outage_go_to_the_spill_file_and_are_written_after(
    tmp_path: Path, linked: tuple[DatabaseLink, str]
) -> None:
    """Held in memory, the searches of an outage were lost by a crash (50 answered, then a SIGKILL: none in the
    log after the restart); past the bound, dropped. They are on disk now, and in the database once it is back."""
    link, url = linked
    app = create_app(outage_settings(tmp_path, url), embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        log = app.state.resources.search_log
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as http:
            assert (await http.post("/search", json={"query": "warm up"})).status_code == 200
            await wait_for(lambda: log.pending == 0 and log.written == 1)
            link.refuse()
            for i in range(100):
                answer = await http.post("/search", json={"query": f"outage search {i}"})
                assert answer.status_code == 200, answer.text  # searches go on; only their log rows wait
                if i % 25 == 0:
                    await anyio.sleep(0.3)  # the writer fails meanwhile
            await wait_for(lambda: log.pending == 0)
            assert log.spilled == 100 and log.dropped == 0  # held in memory before: 40, and 60 dropped
            on_disk = [path for path in (log.spill.path, log.spill.replaying) if path.exists()]
            assert sum(len(path.read_text().splitlines()) for path in on_disk) == 100  # a failed replay's file too

            link.restore()
            await wait_for(lambda: log.written == 101)  # no search needed: the writer tries the database again
            assert not log.spill.has_own_rows()
    assert await count(url, Search) == 101


async def test_searches_spilled_before_a_crash_are_written_by_the_next_start(
    tmp_path: Path, linked: tuple[DatabaseLink, str]
) -> None:
    link, url = linked
    settings = outage_settings(tmp_path, url)
    engine = create_engine_for(url, timeout_seconds=1.0)
    spill = tmp_path / "searches-spill.jsonl"
    log = SearchLog(create_sessionmaker(engine), spill, 1.0, max_pending=40)
    rows = [search_row(f"before the crash {i}") for i in range(30)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        link.refuse()
        for row in rows:
            log.record(row)
        await wait_for(lambda: log.spilled == 30, 10)
        tg.cancel_scope.cancel()  # the process dies: no close, nothing written
    await engine.dispose()
    link.restore()

    app = create_app(settings, embedder=HashingEmbedder())  # the next start, on the same data folder
    async with app.router.lifespan_context(app):
        pass
    ids = {row["id"] for row in rows}
    engine = create_engine_for(url, timeout_seconds=5)
    async with create_sessionmaker(engine)() as session:
        stored = set((await session.scalars(select(Search.id).where(Search.id.in_(ids)))).all())
    await engine.dispose()
    assert stored == ids


async def test_past_the_bound_searches_are_dropped_and_counted_when_the_spill_file_fails_too(
    tmp_path: Path, linked: tuple[DatabaseLink, str], caplog: pytest.LogCaptureFixture
) -> None:
    link, url = linked
    engine = create_engine_for(url, timeout_seconds=1.0)
    spill = tmp_path / "searches-spill.jsonl"
    spill.mkdir()  # a spill "file" that cannot be appended to
    log = SearchLog(create_sessionmaker(engine), spill, 1.0, max_pending=40)
    caplog.set_level(logging.WARNING, logger="service.db.outage")
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        link.refuse()
        for i in range(100):
            log.record(search_row(f"outage search {i}"))
        assert log.pending == 40 and log.dropped == 60  # before the bound: 100 held, none dropped
        link.restore()
        await wait_for(lambda: log.pending == 0)
        await log.close()
        tg.cancel_scope.cancel()
    await engine.dispose()
    assert await count(url, Search) == 40
    said = [r.getMessage() for r in caplog.records if r.name == "service.db.outage"]
    assert len(said) == 1 and "60 rows were dropped" in said[0] and said[0].startswith("search log:"), said


async def test_batched_execution_rows_go_to_the_spill_file_while_the_database_is_down(
    tmp_path: Path, linked: tuple[DatabaseLink, str]
) -> None:
    link, url = linked
    engine = create_engine_for(url, timeout_seconds=1.0)
    log = ExecutionLog(create_sessionmaker(engine), tmp_path / "spill.jsonl", "batched", 1.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        link.refuse()
        for _ in range(20):
            for _ in range(500):
                log.record(make_row())
            await anyio.sleep(0.05)
        await wait_for(lambda: log.pending == 0, 10)  # before: all 10,000 held in memory, retried every 10 s
        assert log.spilled == 10_000 and log.written == 0

        link.restore()
        await anyio.sleep(1.0)  # past the retry wait
        log.record(make_row(id=str(uuid.uuid4())))  # the first batch the database takes brings the spilled ones
        await wait_for(lambda: log.written == 10_001)
        await log.close()
        tg.cancel_scope.cancel()
    await engine.dispose()
    assert await count(url, Execution) == 10_001


async def test_calls_spilled_during_an_outage_are_written_once_it_ends_with_no_call_after(
    tmp_path: Path, linked: tuple[DatabaseLink, str]
) -> None:
    """Before, only the next batch the database took brought the spilled rows: a replica that answered calls during
    an outage and none after (the balancer had sent its traffic elsewhere) kept them on disk, out of the log, the
    statistics and the usage signal until its next start, and did not write them at its shutdown either."""
    link, url = linked
    engine = create_engine_for(url, timeout_seconds=1.0)
    log = ExecutionLog(create_sessionmaker(engine), tmp_path / "spill.jsonl", "commit", 1.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        link.refuse()
        for _ in range(20):
            waiter = log.record(make_row())
            assert waiter is not None
            await waiter  # answered: durable in the spill file
        assert log.spilled == 20 and log.written == 0
        link.restore()
        await wait_for(lambda: log.written == 20, 20)  # no call needed: the writer tries the database again
        assert not log.spill.has_own_rows()
        await log.close()
        tg.cancel_scope.cancel()
    await engine.dispose()
    assert await count(url, Execution) == 20
