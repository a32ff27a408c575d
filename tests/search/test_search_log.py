"""The search log: searches are written in batches off the request path, and none is lost at shutdown."""

from __future__ import annotations

import asyncio

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
