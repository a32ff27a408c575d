"""The cluster side of one replica: its id, the Redis bus, the writer locks and the catalog follower.

This module sits below the domains (they import `cluster_state` and `announce`); the start-up hook that
connects everything and wires it into the domains is cluster/runtime.py."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.cluster.bus import ClusterBus
from service.cluster.writers import ServerWriters

if TYPE_CHECKING:
    from service.cluster.follower import CatalogFollower
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


def cluster_state(resources: Resources) -> Cluster:
    """The replica's cluster state, built on first use: its id and, when configured, its (not yet connected)
    Redis bus."""
    if resources.cluster is None:
        config = resources.settings.cluster
        replica_id = config.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        bus = None
        if config.redis_url:
            bus = ClusterBus(config.redis_url, config.key_prefix, replica_id, config.redis_timeout_seconds)
        resources.cluster = Cluster(replica_id=replica_id, bus=bus)
    return resources.cluster


async def announce(resources: Resources, kind: str = CATALOG_EVENT, **data: Any) -> None:
    """Tell the other replicas (no-op in one process; while Redis is down they poll)."""
    bus = cluster_state(resources).bus
    if bus is not None:
        await bus.publish(kind, **data)


def readiness(cluster: Cluster) -> str:
    """The /readyz line of Redis."""
    if cluster.bus is None:
        return "not configured"
    if cluster.bus.healthy:
        return "ok"
    # The kind of error only: /readyz answers anyone, and the text names Redis's address (the log has it).
    reason = (cluster.bus.last_error or "not connected yet").partition(":")[0]
    return f"degraded: {reason} (limits per replica, catalog followed by polling)"
