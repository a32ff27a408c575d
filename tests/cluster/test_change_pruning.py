"""The catalog's change sequence is pruned past `cluster.change_retention_hours` (its latest change always stays),
and a replica that had not followed that far goes on from the first change kept and compares the whole catalog,
on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from indexer.embedding import HashingEmbedder
from service.cluster.changes import TOOLS, prune_changes, record_change
from service.cluster.follower import CatalogFollower
from service.cluster.runtime import PRUNE_TASK
from service.cluster.state import cluster_state
from service.db.models import CatalogChange, utcnow
from service.main import create_app
from service.resources import Resources, build_resources, close_resources, start_resources
from tests.conftest import make_settings


@pytest.fixture
async def resources(tmp_path: Path, database_url: str) -> AsyncIterator[Resources]:
    started = build_resources(make_settings(tmp_path, db={"url": database_url}), HashingEmbedder())
    await start_resources(started)
    try:
        yield started
    finally:
        await close_resources(started)


async def add_changes(resources: Resources, count: int, age: timedelta) -> None:
    async with resources.session() as session:
        for _ in range(count):
            row = record_change(session, TOOLS, [], server=None, origin=cluster_state(resources).replica_id)
            row.created_at = utcnow() - age
            await session.flush()
        await session.commit()


async def kept(resources: Resources) -> list[int]:
    async with resources.session() as session:
        return list((await session.scalars(select(CatalogChange.seq).order_by(CatalogChange.seq))).all())


async def test_changes_past_the_retention_go_and_the_latest_stays(resources: Resources) -> None:
    await add_changes(resources, 5, timedelta(hours=200))
    await add_changes(resources, 2, timedelta(minutes=1))
    async with resources.session() as session:
        assert await prune_changes(session, utcnow() - timedelta(hours=168)) == 5
    assert await kept(resources) == [6, 7]
    await add_changes(resources, 2, timedelta(hours=200))
    async with resources.session() as session:
        assert await prune_changes(session, utcnow() - timedelta(hours=168)) == 3  # 6, 7 (newer) and 8
    assert await kept(resources) == [9]
    await add_changes(resources, 1, timedelta(0))
    assert await kept(resources) == [9, 10]  # no number handed out again


async def test_a_replica_behind_the_pruned_changes_goes_on_and_compares_everything(resources: Resources) -> None:
    await add_changes(resources, 30, timedelta(hours=2))
    async with resources.session() as session:
        assert await prune_changes(session, utcnow() - timedelta(hours=1, minutes=59)) == 29
    await add_changes(resources, 2, timedelta(hours=1))
    follower = CatalogFollower(resources, start_seq=5)
    await follower.catch_up()
    assert follower.watermark == 32 and follower._full  # without the jump: 5, one horizon per missing number

    await add_changes(resources, 1, timedelta(0))  # a recent first change: its gap may be a write in flight
    async with resources.session() as session:
        assert await prune_changes(session, utcnow() - timedelta(minutes=1)) == 3  # 30, 31, 32
    recent = CatalogFollower(resources, start_seq=20)
    await recent.catch_up()
    assert recent.watermark == 20 and not recent._full


@pytest.mark.parametrize("hours", [168.0, 0.0])
async def test_the_pruning_runs_unless_the_retention_is_zero(tmp_path: Path, hours: float) -> None:
    settings = make_settings(tmp_path)
    settings.cluster.change_retention_hours = hours
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        status = app.state.resources.supervisor.status.get(PRUNE_TASK)
        assert (status.state if status else None) == ("running" if hours else None)
