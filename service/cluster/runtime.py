"""The cluster's start-up and shutdown hooks: connect Redis, take writer locks, follow the catalog.

`start_cluster` runs first of the app's hooks (the gateway's first syncs ask for writer locks). It installs
what the domains use without importing the cluster: the shared rate-limit buckets and the key-change
announcement of the key resolver (policy/keys.py)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from service.catalog.server_vectors import refresh_servers
from service.cluster.changes import prune_changes
from service.cluster.follower import CatalogFollower
from service.cluster.ratelimit import RedisTokenBucketLimiter
from service.cluster.state import CATALOG_EVENT, KEYS_EVENT, announce, cluster_state
from service.cluster.writers import ServerWriters
from service.db.models import utcnow
from service.policy.keys import key_resolver
from service.resources import Resources

logger = logging.getLogger(__name__)

PRUNE_TASK = "prune-changes"
PRUNE_INTERVAL_SECONDS = 3600.0


async def start_cluster(resources: Resources) -> None:
    """Start-up hook: writer locks always (PostgreSQL shares them); with Redis, the bus and the follower."""
    cluster = cluster_state(resources)
    assert resources.engine is not None
    cluster.writers = ServerWriters(resources.engine)
    if resources.settings.cluster.change_retention_hours > 0:
        resources.supervisor.start(PRUNE_TASK, lambda: _prune_changes(resources))
    bus = cluster.bus
    if bus is None:
        return
    follower = cluster.follower = CatalogFollower(resources, cluster.start_seq)
    resolver = key_resolver(resources)
    policy = resources.settings.policy
    resolver.limiter = RedisTokenBucketLimiter(bus, policy.rate_limit_per_minute, policy.rate_limit_burst)

    async def keys_changed() -> None:
        await announce(resources, KEYS_EVENT)

    async def on_catalog(message: dict[str, Any]) -> None:
        if message.get("origin") != cluster.replica_id:
            follower.wake()

    async def on_keys(message: dict[str, Any]) -> None:
        resolver.invalidate()

    async def on_connect() -> None:
        follower.wake(full=True)  # events published while we were away are caught up from SQL
        resolver.invalidate()  # and keys revoked meanwhile on another replica are looked up again

    async def servers_changed(server_id: str) -> None:
        await refresh_servers(resources, [server_id])

    async def all_servers() -> None:
        await refresh_servers(resources)

    follower.on_tools_changed.append(servers_changed)  # server documents, as the tools and info changed
    follower.on_full.append(all_servers)
    resolver.on_change = keys_changed
    bus.on(CATALOG_EVENT, on_catalog)
    bus.on(KEYS_EVENT, on_keys)
    bus.on_connect(on_connect)
    bus.start(resources.supervisor)
    follower.start()


async def stop_cluster(resources: Resources) -> None:
    """Shutdown hook: stop pruning and following, release the writer locks, close Redis."""
    await resources.supervisor.stop(PRUNE_TASK)
    cluster = cluster_state(resources)
    if cluster.follower is not None:
        await cluster.follower.close()
    if cluster.writers is not None:
        await cluster.writers.close()
    if cluster.bus is not None:
        await cluster.bus.close()


async def _prune_changes(resources: Resources) -> None:
    """Every hour, the catalog changes older than `cluster.change_retention_hours` go (they are written with every
    registration, refresh and removal, and only replicas following recent ones read them)."""
    hours = resources.settings.cluster.change_retention_hours
    while True:  # errors go to the supervisor (restart with backoff)
        async with resources.session() as session:
            deleted = await prune_changes(session, utcnow() - timedelta(hours=hours))
        if deleted:
            logger.info("pruned %d catalog changes older than %g h", deleted, hours)
        await asyncio.sleep(PRUNE_INTERVAL_SECONDS)
