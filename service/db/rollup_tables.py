"""The rollup tables that analytics read, kept by the statistics refresh (usage/rollups.py; migration 0002)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Float, Index, String, Table

from service.db.models import Base

LATENCY_BUCKETS = 40  # bucket 0: under 1 ms; bucket k: [2^((k-1)/2), 2^(k/2)) ms; the last one is open-ended


def _counter(name: str) -> Column[int]:
    return Column(name, BigInteger, nullable=False, server_default="0")


def latency_bucket_columns() -> list[Column[int]]:
    """h00 ... h39: how many calls that reached the server took a duration in each bucket."""
    return [_counter(f"h{i:02d}") for i in range(LATENCY_BUCKETS)]


usage_daily = Table(
    "usage_daily",
    Base.metadata,
    Column("day", DateTime(timezone=True), primary_key=True),  # UTC midnight
    Column("caller", String(128), primary_key=True),
    Column("tool", String(64), primary_key=True),
    _counter("calls"),
    _counter("successes"),
    _counter("reached"),  # calls that reached the upstream server (their durations are the latency)
    Column("duration_sum", Float, nullable=False, server_default="0"),
    Column("duration_max", Float, nullable=False, server_default="0"),
    _counter("input_tokens"),
    _counter("output_tokens"),
    _counter("from_search"),
    *latency_bucket_columns(),
    Index("ix_usage_daily_caller_day", "caller", "day"),
)
"""Calls per UTC day, caller and tool."""

usage_hourly = Table(
    "usage_hourly",
    Base.metadata,
    Column("hour", DateTime(timezone=True), primary_key=True),
    Column("caller", String(128), primary_key=True),
    _counter("calls"),
    _counter("successes"),
    _counter("reached"),
    Column("duration_sum", Float, nullable=False, server_default="0"),
    _counter("searches"),
    _counter("empty_searches"),
    _counter("followed_searches"),  # searches of this hour that at least one call came from
    Index("ix_usage_hourly_caller_hour", "caller", "hour"),
)
"""Calls and searches per UTC hour and caller."""

usage_errors_daily = Table(
    "usage_errors_daily",
    Base.metadata,
    Column("day", DateTime(timezone=True), primary_key=True),
    Column("caller", String(128), primary_key=True),
    Column("tool", String(64), primary_key=True),
    Column("error", String(128), primary_key=True),  # the execution status (migration 0012)
    _counter("count"),
)
"""Failed calls per UTC day, caller, tool and execution status."""

tool_pairs_daily = Table(
    "tool_pairs_daily",
    Base.metadata,
    Column("day", DateTime(timezone=True), primary_key=True),
    Column("caller", String(128), primary_key=True),
    Column("tool_a", String(64), primary_key=True),  # tool_a < tool_b
    Column("tool_b", String(64), primary_key=True),
    _counter("count"),
)
"""Two different tools called one right after the other by the same caller (within the configured window)."""

caller_last_call = Table(
    "caller_last_call",
    Base.metadata,
    Column("caller", String(128), primary_key=True),
    Column("tool", String(64), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
)
"""Each caller's latest call seen by the refresh, to pair it with the next one."""
