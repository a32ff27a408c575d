"""The search log: searches are written in batches off the request path, and none is lost at shutdown."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from sqlalchemy import func, select

from indexer.embedding import HashingEmbedder
from service.db.engine import create_engine_for, create_sessionmaker
from service.db.models import Search, utcnow
from service.main import create_app
from service.settings import Settings

TOOLS = [
    {"server": "weather", "name": "get_forecast", "description": "Weather forecast for a city"},
    {"server": "mail", "name": "send_email", "description": "Send an email message to a recipient"},
]


async def _count_searches(url: str) -> int:
    engine = create_engine_for(url)
    try:
        async with create_sessionmaker(engine)() as session:
            return int(await session.scalar(select(func.count()).select_from(Search)) or 0)
    finally:
        await engine.dispose()


async def test_concurrent_searches_share_batches_and_shutdown_writes_the_rest(settings: Settings) -> None:
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        log = app.state.resources.search_log
        assert log is not None
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            assert (await client.post("/tools", json={"tools": TOOLS})).status_code == 200
            responses = await asyncio.gather(
                *(client.post("/search", json={"query": f"weather in city {i}"}) for i in range(40))
            )
            assert {r.status_code for r in responses} == {200}
        # Shut down at once: rows still lingering in memory are written by the shutdown, not dropped.
    assert log.pending == 0 and log.lost == 0
    assert log.written == 40
    assert 1 <= log.batches < 40
    assert await _count_searches(settings.database_url) == 40
    assert app.state.resources.search_log is None


async def test_rows_recorded_together_land_in_one_insert(settings: Settings) -> None:
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        resources = app.state.resources
        log = resources.search_log
        before = log.batches
        for i in range(5):  # recorded in one go: the writer takes them all in one INSERT
            log.record(
                {
                    "id": f"00000000-0000-0000-0000-00000000000{i}",
                    "caller": "local",
                    "query": f"q{i}",
                    "k": 3,
                    "results": [],
                    "result_count": 0,
                    "latency_ms": 1.0,
                    "created_at": utcnow(),
                }
            )
        for _ in range(200):
            if log.written == 5:
                break
            await asyncio.sleep(0.02)
        assert log.written == 5 and log.batches - before == 1
        async with resources.session() as session:
            rows = (await session.scalars(select(Search).order_by(Search.id))).all()
        assert [(r.query, r.k, r.caller) for r in rows] == [(f"q{i}", 3, "local") for i in range(5)]


def _row(i: int) -> dict:
    return {
        "id": f"00000000-0000-0000-0000-0000000001{i:02d}",
        "caller": "local",
        "query": f"spilled {i}",
        "k": 3,
        "results": [{"name": "mail__send_email", "score": 0.5}],
        "result_count": 1,
        "latency_ms": 1.0,
        "created_at": utcnow(),
    }


async def test_rows_the_database_refuses_at_shutdown_are_spilled_and_written_at_the_next_start(
    settings: Settings, tmp_path: Path
) -> None:
    from service.db.engine import upgrade_database
    from service.search.log import SearchLog

    spill = tmp_path / "searches-spill.jsonl"
    down = create_engine_for(f"sqlite:///{tmp_path / 'missing-folder' / 'x.db'}")  # cannot be opened
    log = SearchLog(create_sessionmaker(down), spill)
    for i in range(7):
        log.record(_row(i))
    await log.close()
    await down.dispose()
    assert log.lost == 0 and log.pending == 0 and spill.is_file()
    upgrade_database(settings.database_url)
    engine = create_engine_for(settings.database_url)
    try:
        async with create_sessionmaker(engine)() as session:
            session.add(Search(**_row(3)))  # written before a crash, spilled too: not written twice
            await session.commit()
        again = SearchLog(create_sessionmaker(engine), spill)
        assert await again.replay() == 7
        assert await again.replay() == 0 and not spill.exists()
    finally:
        await engine.dispose()
    assert await _count_searches(settings.database_url) == 7


async def test_a_running_writer_claims_what_a_replica_that_is_gone_spilled_in_the_shared_folder(
    settings: Settings, tmp_path: Path
) -> None:
    """A replica stopped during an outage of its own spills its searches to the shared folder and is not started
    again; a replica already running writes them within seconds. Before, only a start replayed that folder."""
    from service.db.engine import upgrade_database
    from service.db.spill import LOOK_SECONDS
    from service.search.log import SearchLog
    from service.supervisor import Supervisor

    shared = tmp_path / "shared"
    upgrade_database(settings.database_url)
    engine = create_engine_for(settings.database_url)
    supervisor = Supervisor()
    live = SearchLog(create_sessionmaker(engine), shared / "searches-spill.jsonl", shared_spill=True)
    supervisor.start("search-log", live.run)
    try:
        down = create_engine_for(f"sqlite:///{tmp_path / 'missing-folder' / 'x.db'}")  # its database unreachable
        gone = SearchLog(create_sessionmaker(down), shared / "searches-spill.jsonl", shared_spill=True)
        for i in range(7):
            gone.record(_row(i))
        await gone.close()
        await down.dispose()
        assert gone.spill is not None and gone.spill.path.stat().st_size > 0
        gone.spill.close()  # its process ends: the lock is let go
        waited = 0.0
        while await _count_searches(settings.database_url) < 7 and waited < 3 * LOOK_SECONDS:
            await asyncio.sleep(0.2)
            waited += 0.2
        assert await _count_searches(settings.database_url) == 7
        assert not gone.spill.path.exists() and live.pending == 0
    finally:
        await live.close()
        await supervisor.stop("search-log")
        await engine.dispose()
