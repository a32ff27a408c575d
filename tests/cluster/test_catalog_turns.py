"""Catalog writes of two replicas on one PostgreSQL database take turns, in one process (each replica its own index
and connections): quick enough for every run, where tests/cluster/test_replica_races.py starts real replicas."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.catalog.service import register_tools, sync_server_tools
from service.db.models import Server, Tool
from service.resources import Resources
from tests.cluster.cluster_support import replicas_in_process

pytestmark = pytest.mark.postgres

TOOLS = [
    {"server": "twins", "name": f"action_{i}", "description": f"Perform action number {i} of the twins service."}
    for i in range(5)
]


@pytest.fixture
async def replicas(tmp_path: Path, postgres_url: str) -> AsyncIterator[list[Resources]]:
    async with replicas_in_process(tmp_path, postgres_url, search=True) as started:
        yield started


async def _count(resources: Resources, statement: object) -> int:
    async with resources.session() as session:
        return int(await session.scalar(statement) or 0)  # type: ignore[call-overload]


async def test_the_same_new_tools_registered_at_once_are_created_by_one_and_unchanged_for_the_other(
    replicas: list[Resources],
) -> None:
    for _ in range(3):  # rounds after the first find the rows: unchanged on both
        reports = await asyncio.gather(*(register_tools(r, TOOLS) for r in replicas))
        counts = sorted((len(r.created), len(r.unchanged), len(r.errors)) for r in reports)
        assert counts in ([(0, 5, 0), (5, 0, 0)], [(0, 5, 0), (0, 5, 0)]), counts
    a = replicas[0]
    assert await _count(a, select(func.count()).select_from(Tool).where(Tool.server_id == "twins")) == 5
    assert await _count(a, select(func.count()).select_from(Server).where(Server.id == "twins")) == 1
    names = [f"twins__action_{i}" for i in range(5)]
    for resources in replicas:  # each replica indexed them, whichever created the rows
        assert resources.retriever is not None and resources.index is not None
        assert sorted(await resources.run_index(resources.index.payloads, names)) == names
        assert [resources.retriever.directory.server(n) for n in names] == ["twins"] * 5


async def test_a_listing_of_a_server_removed_meanwhile_does_not_bring_it_back(replicas: list[Resources]) -> None:
    listed = [{"name": "echo", "description": "Echo the text back."}]
    kept = await sync_server_tools(replicas[0], "gone", listed, transport="stdio", config={}, existing_only=True)
    assert kept.created == [] and kept.removed == []
    a = replicas[0]
    assert await _count(a, select(func.count()).select_from(Server).where(Server.id == "gone")) == 0
    assert await _count(a, select(func.count()).select_from(Tool).where(Tool.server_id == "gone")) == 0
    added = await sync_server_tools(a, "gone", listed, transport="stdio", config={})  # a server being added
    assert added.created == ["gone__echo"]
