"""The demo catalog, indexed at start-up when the catalog is empty: once, even when replicas start together."""

from __future__ import annotations

from sqlalchemy import select

from service.catalog.files import demo_catalog
from service.catalog.reconcile import reconcile_index
from service.catalog.server_info import demo_servers
from service.catalog.service import register_tools
from service.db.engine import DEMO_SEED_LOCK_KEY, one_at_a_time
from service.db.models import Tool, active
from service.resources import Resources


async def seed_demo_catalog(resources: Resources) -> int | None:
    """Register the bundled demo tools if the catalog holds no active tool: how many it created, None if it held some.

    Replicas starting together on one empty PostgreSQL database take turns: the first seeds, the next finds its
    tools and takes them into its own index. Both used to insert the same server rows, and one start-up failed on a
    UniqueViolation."""
    assert resources.engine is not None
    async with one_at_a_time(resources.engine, DEMO_SEED_LOCK_KEY):
        async with resources.session() as session:
            held = await session.scalar(select(Tool.qualified_name).where(active()).limit(1))
        if held is not None:
            await reconcile_index(resources)  # seeded by another replica since this one reconciled
            return None
        report = await register_tools(resources, demo_catalog(), servers=demo_servers())
        return len(report.created)
