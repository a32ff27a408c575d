"""The cluster side of one replica: its id, the Redis bus, the writer locks and the catalog follower."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.cluster.bus import ClusterBus
from service.cluster.follower import CatalogFollower
from service.cluster.writers import ServerWriters
from service.settings import Settings

if TYPE_CHECKING:
    from service.resources import Resources

logger = logging.getLogger(__name__)

CATALOG_EVENT = "catalog"
KEYS_EVENT = "keys"


@dataclass
class Cluster:
    """Built cheaply with the resources; `start_cluster` connects. `bus` is None without a Redis URL."""

    replica_id: str
    bus: ClusterBus | None = None
    writers: ServerWriters | None = None
    follower: CatalogFollower | None = None
    start_seq: int = 0  # the change sequence when this replica loaded the catalog
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.bus is not None


def build_cluster(settings: Settings) -> Cluster:
    """The replica's id and, when configured, its (not yet connected) Redis bus."""
    config = settings.cluster
    replica_id = config.replica_id or f"{socket.gethostname()}-{os.getpid()}"
    bus = None
    if config.redis_url:
        bus = ClusterBus(config.redis_url, config.key_prefix, replica_id, config.redis_timeout_seconds)
    return Cluster(replica_id=replica_id, bus=bus)


async def start_cluster(resources: Resources) -> None:
    """Start-up hook: writer locks always (PostgreSQL shares them); with Redis, the bus and the follower."""
    cluster = resources.cluster
    assert resources.engine is not None
    cluster.writers = ServerWriters(resources.engine)
    if cluster.bus is None:
        return
    follower = cluster.follower = CatalogFollower(resources, cluster.start_seq)
    bus = cluster.bus

    async def on_catalog(message: dict[str, Any]) -> None:
        if message.get("origin") != cluster.replica_id:
            follower.wake()

    async def on_keys(message: dict[str, Any]) -> None:
        from service.auth import key_resolver

        key_resolver(resources).invalidate()

    async def on_connect() -> None:
        follower.wake(full=True)  # events published while we were away are caught up from SQL

    bus.on(CATALOG_EVENT, on_catalog)
    bus.on(KEYS_EVENT, on_keys)
    bus.on_connect(on_connect)
    bus.start()
    follower.start()


async def stop_cluster(resources: Resources) -> None:
    """Shutdown hook: stop following, release the writer locks, close Redis."""
    cluster = resources.cluster
    if cluster.follower is not None:
        await cluster.follower.close()
    if cluster.writers is not None:
        await cluster.writers.close()
    if cluster.bus is not None:
        await cluster.bus.close()


async def announce(resources: Resources, kind: str = CATALOG_EVENT, **data: Any) -> None:
    """Tell the other replicas (no-op in one process; while Redis is down they poll)."""
    if resources.cluster.bus is not None:
        await resources.cluster.bus.publish(kind, **data)


def readiness(cluster: Cluster) -> str:
    """The /readyz line of Redis."""
    if cluster.bus is None:
        return "not configured"
    if cluster.bus.healthy:
        return "ok"
    reason = cluster.bus.last_error or "not connected yet"
    return f"degraded: {reason} (limits per replica, catalog followed by polling)"
