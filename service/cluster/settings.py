"""The cluster section of the settings (service/settings.py reads it as TOOLSCOUT_CLUSTER__...)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ClusterSettings(BaseModel):
    """Several replicas: shared ephemeral state in Redis; unset `redis_url` keeps everything in one process."""

    model_config = ConfigDict(extra="forbid")  # as service.settings.Section's (which imports this module)

    redis_url: str | None = None
    key_prefix: str = "toolscout"  # Redis keys and channels start with this (several deployments per Redis)
    replica_id: str | None = None  # default: host name and process id
    # Catalog follow-up: a change event wakes every replica at once; this poll catches missed events
    # (fallback_poll_seconds while Redis is down), and the whole catalog is compared every full_catchup_seconds.
    poll_seconds: float = 5.0
    fallback_poll_seconds: float = 1.0
    full_catchup_seconds: float = 60.0
    gap_horizon_seconds: float = 30.0  # a hole in the change sequence older than this was a rolled-back write
    # Catalog changes older than this are deleted every hour (the latest stays); 0 keeps them all. A replica that
    # had not followed that far compares the whole catalog instead.
    change_retention_hours: float = 168.0
    lock_retry_seconds: float = 5.0  # how often a replica tries to become the writer of a server's catalog
    redis_timeout_seconds: float = 1.0
