"""A PostgreSQL server that stops answering (a stalled server, a partition without resets) costs at most
`db.timeout_seconds`: a new connection gives up, the execution log spills the batch it was writing so the calls
waiting for it answer (and writes it once the database is back), the search log spills at shutdown, and /readyz
says "not ready" instead of hanging."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError

from indexer.embedding import HashingEmbedder
from service.db.engine import (
    DatabaseUnreachable,
    create_engine_for,
    create_sessionmaker,
    postgres_timeouts,
    upgrade_database,
    write_bound,
)
from service.db.models import Execution
from service.execution.log import ExecutionLog
from service.main import create_app
from service.search.log import SearchLog
from service.supervisor import Supervisor
from tests.conftest import make_settings
from tests.database_link import DatabaseLink
from tests.execution.test_execute_log import make_row
from tests.search.test_search_log import _row

pytestmark = pytest.mark.postgres


@asynccontextmanager
async def app_client(tmp_path: Path, url: str, timeout_seconds: float) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app, started on the database at `url` with that timeout."""
    settings = make_settings(tmp_path, db={"url": url, "timeout_seconds": timeout_seconds})
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield http


def test_the_timeouts_go_to_libpq_unless_the_url_sets_them() -> None:
    given = postgres_timeouts("postgresql+psycopg://u@h/db?connect_timeout=30", 2.5)
    assert "connect_timeout" not in given
    assert given["tcp_user_timeout"] == 2500 and given["keepalives_idle"] == 3 and given["keepalives"] == 1
    # SQLite's writes wait for the file lock, in a thread a cancellation would not stop: no bound there.
    assert write_bound("postgresql+psycopg://u@h/db", 2.5) == 2.5 and write_bound("sqlite:///x.db", 2.5) is None


async def test_a_connection_to_a_server_that_does_not_answer_gives_up(linked: tuple[DatabaseLink, str]) -> None:
    link, url = linked
    engine = create_engine_for(url, timeout_seconds=1)
    link.hang()

    async def ask() -> None:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    try:
        started = time.monotonic()
        with pytest.raises(OperationalError):
            await asyncio.wait_for(ask(), 20)  # psycopg's own limit was 130 s
        assert time.monotonic() - started < 5
    finally:
        link.restore()
        await engine.dispose()


async def test_a_start_against_a_database_that_does_not_answer_fails_instead_of_waiting(
    linked: tuple[DatabaseLink, str],
) -> None:
    link, url = linked
    link.hang()
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnreachable, match="cannot connect"):  # one line, not a traceback
            await asyncio.wait_for(asyncio.to_thread(upgrade_database, url, "head", 1), 20)  # waited for ever
        assert time.monotonic() - started < 5
    finally:
        link.restore()


async def test_a_batch_the_database_leaves_unanswered_is_spilled_and_written_later(
    linked: tuple[DatabaseLink, str], tmp_path: Path
) -> None:
    link, url = linked
    engine = create_engine_for(url, timeout_seconds=1)
    sessions = create_sessionmaker(engine)
    log = ExecutionLog(sessions, tmp_path / "spill.jsonl", "commit", write_timeout_seconds=1)
    supervisor = Supervisor()
    await log.start()
    supervisor.start("execution-log", log.run)
    try:
        first = make_row()
        await asyncio.wait_for(log.record(first), 10)  # type: ignore[arg-type]
        link.hang()
        stalled = [make_row() for _ in range(3)]
        # The calls waiting for their rows answer once the batch is on disk (they waited for the kernel before).
        await asyncio.wait_for(asyncio.gather(*(log.record(row) for row in stalled)), 10)  # type: ignore[misc]
        assert log.spilled == 3 and log.spill.has_rows()
        link.restore()
        await asyncio.sleep(0.5)  # past the retry pause: the next batch goes to the database, then the replay
        last = make_row()
        await asyncio.wait_for(log.record(last), 10)  # type: ignore[arg-type]
        for _ in range(50):
            if not log.spill.has_rows():
                break
            await asyncio.sleep(0.1)
        async with sessions() as session:
            ids = set((await session.scalars(select(Execution.id))).all())
            count = await session.scalar(select(func.count()).select_from(Execution))
        assert ids == {row["id"] for row in [first, *stalled, last]} and count == 5
    finally:
        link.restore()
        await log.close(supervisor.task("execution-log"))
        await engine.dispose()


async def test_readyz_says_not_ready_when_the_database_stalls(
    linked: tuple[DatabaseLink, str], tmp_path: Path
) -> None:
    link, url = linked
    async with app_client(tmp_path, url, timeout_seconds=1) as http:
        assert (await http.get("/readyz")).json()["checks"]["database"] == "ok"
        link.hang()
        stalled = await asyncio.wait_for(http.get("/readyz"), 10)  # waited for ever before
        link.restore()
        assert stalled.status_code == 503
        assert stalled.json()["checks"]["database"] == "error: TimeoutError"
        assert (await http.get(f"/tools/none__{uuid.uuid4().hex[:6]}")).status_code == 404


async def test_the_search_log_spills_at_shutdown_instead_of_waiting_for_a_stalled_database(
    linked: tuple[DatabaseLink, str], tmp_path: Path
) -> None:
    link, url = linked
    engine = create_engine_for(url, timeout_seconds=1)
    spill = tmp_path / "searches-spill.jsonl"
    log = SearchLog(create_sessionmaker(engine), spill, write_timeout_seconds=1)
    async with engine.connect() as connection:  # a pooled connection, whose checkout ping will wait
        await connection.execute(text("SELECT 1"))
    link.hang()
    try:
        for i in range(3):
            log.record(_row(i))
        started = time.monotonic()
        await asyncio.wait_for(log.close(), 20)  # waited for ever before
        assert time.monotonic() - started < 8
        assert log.lost == 0 and log.pending == 0 and len(spill.read_text().splitlines()) == 3
    finally:
        link.restore()
        await engine.dispose()


async def test_metrics_answer_while_the_database_stalls(linked: tuple[DatabaseLink, str], tmp_path: Path) -> None:
    """A scrape is wanted most when the database is in trouble: it answers, with toolscout_database_up 0 and
    without the catalog's count (it was a 503 after two database timeouts)."""
    link, url = linked
    async with app_client(tmp_path, url, timeout_seconds=5) as http:
        healthy = await http.get("/metrics")
        assert "toolscout_database_up 1.0" in healthy.text and "toolscout_catalog_tools" in healthy.text
        link.hang()
        started = time.monotonic()
        stalled = await asyncio.wait_for(http.get("/metrics"), 30)
        took = time.monotonic() - started
        link.restore()
    assert stalled.status_code == 200 and took < 4, (stalled.status_code, took)
    assert "toolscout_database_up 0.0" in stalled.text
    assert "toolscout_catalog_tools{" not in stalled.text and "toolscout_http_requests_total" in stalled.text
