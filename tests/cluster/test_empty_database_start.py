"""Replicas started together on an empty PostgreSQL database: one seeds the demo catalog, none fails to start.

Both used to find the catalog empty and insert the same rows: one start-up ended on a UniqueViolation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from indexer.embedding import HashingEmbedder
from service.catalog.files import demo_catalog
from service.catalog.seed import seed_demo_catalog
from service.db.engine import MIGRATION_LOCK_KEY, sync_url
from service.resources import build_resources, close_resources, start_resources
from service.search.service import start_search
from tests.cluster.cluster_support import Cluster
from tests.conftest import fresh_database, make_settings

pytestmark = pytest.mark.postgres

DEMO_TOOLS = len(demo_catalog())


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A new PostgreSQL database with a random name, not even migrated; dropped afterwards."""
    with fresh_database() as url:
        yield url


async def test_seeds_run_at_once_on_one_database_create_the_demo_catalog_once(
    tmp_path: Path, empty_database: str
) -> None:
    """Two replicas' start-ups at the same moment, in one process (each its own index and connections): quick
    enough for every run, where the two processes below are a cluster test."""
    replicas = []
    for name in ("a", "b"):
        resources = build_resources(make_settings(tmp_path / name, db={"url": empty_database}), HashingEmbedder())
        await start_resources(resources)
        await start_search(resources)
        replicas.append(resources)
    try:
        seeded = await asyncio.gather(*(seed_demo_catalog(r) for r in replicas))
        assert sorted(seeded, key=str) == [DEMO_TOOLS, None]  # one seeded, the other took its tools in
        for resources in replicas:
            assert resources.retriever is not None
            assert len(resources.retriever.directory) == DEMO_TOOLS
        assert await seed_demo_catalog(replicas[0]) is None  # a catalog with tools is never seeded again
    finally:
        for resources in replicas:
            await close_resources(resources)


@pytest.mark.cluster
@pytest.mark.model
def test_two_replicas_started_together_on_an_empty_database_both_serve_the_demo_catalog(
    tmp_path: Path, empty_database: str
) -> None:
    # Redis or not, the database is what the replicas share; the demo servers are not this test's topic.
    group = Cluster(tmp_path, empty_database, TOOLSCOUT_DEMO_CATALOG="true", TOOLSCOUT_CLUSTER__REDIS_URL="")
    try:
        group.start(2, together=True)
        seeds = ["indexed 85 demo tools" in r.log_text() for r in group.replicas]
        assert sorted(seeds) == [False, True], [r.log_text()[-2000:] for r in group.replicas]
        for replica in group.replicas:
            assert "UniqueViolation" not in replica.log_text()
            tools = httpx.get(f"{replica.url}/tools", params={"limit": 500}, timeout=30).json()
            assert len(tools["tools"]) == DEMO_TOOLS == 85, json.dumps(tools)[:500]
            search = httpx.post(f"{replica.url}/search", json={"query": "what time is it in Tokyo", "k": 1}, timeout=30)
            assert [r["server"] for r in search.json()["results"]] == ["time"], search.text
    finally:
        group.stop()


async def test_a_replica_starting_while_another_migrates_waits_for_it(tmp_path: Path, empty_database: str) -> None:
    """The migration lock held (another replica migrating): a start waits for it instead of failing or migrating
    alongside, and serves once it is released."""
    holder = create_engine(sync_url(empty_database), poolclass=NullPool)
    resources = build_resources(make_settings(tmp_path, db={"url": empty_database}), HashingEmbedder())
    try:
        with holder.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()
            starting = asyncio.create_task(start_resources(resources))
            await asyncio.sleep(2)
            assert not starting.done()
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()
            await asyncio.wait_for(starting, 60)
        async with resources.session() as session:
            assert await session.scalar(text("SELECT count(*) FROM tools")) == 0
    finally:
        await close_resources(resources)
        holder.dispose()
