"""SQLAlchemy models. The schema is created and changed only by the Alembic migrations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    and_,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Timezone-aware now, the only clock the models use."""
    return datetime.now(UTC)


@overload
def as_utc(moment: datetime) -> datetime: ...
@overload
def as_utc(moment: None) -> None: ...
def as_utc(moment: datetime | None) -> datetime | None:
    """A timestamp in UTC: a naive one is taken to be UTC (SQLite hands stored ones back naive; they were
    written in UTC), an aware one is converted; None stays None."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: DateTime(timezone=True)}


class Server(Base):
    """An upstream MCP server (or a catalog source registered over the API)."""

    __tablename__ = "servers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    transport: Mapped[str] = mapped_column(String(16), default="catalog")  # stdio | http | catalog
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # What the server says about itself (serverInfo name, title, description; initialize's instructions).
    info: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    # 0015: an upstream's changed info held for an admin's review (service/catalog/server_info.py): `info` keeps the
    # approved text, which ranking uses; this holds the new block, why, when and what changed. None: nothing held.
    held_info: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    state: Mapped[str] = mapped_column(String(16), default="registered")
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    last_sync_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Tool(Base):
    """The catalog of record: one row per qualified tool name."""

    __tablename__ = "tools"

    qualified_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    server_id: Mapped[str] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    description: Mapped[str] = mapped_column(Text, default="")
    input_schema: Mapped[dict[str, Any]] = mapped_column(default=dict)
    annotations: Mapped[dict[str, Any]] = mapped_column(default=dict)
    tags: Mapped[list[Any]] = mapped_column(default=list)
    content_hash: Mapped[str] = mapped_column(String(64))
    deprecated: Mapped[bool] = mapped_column(Boolean, default=False)
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    # 0010: why the tool is held for an admin's review (None: it is not); a held tool is in no index, no listing
    # and answers no call (service/catalog/holds.py). `hold`: the details (kind, matched text, previous definition).
    held_reason: Mapped[str | None] = mapped_column(Text, default=None)
    hold: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # The definition hash an upstream's own listing established (trust on first use) or an admin approved; a
    # listing of another definition is held. None for tools registered through the catalog API.
    trusted_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    trusted_at: Mapped[datetime | None] = mapped_column(default=None)
    # The definition an admin released from a hold: not held again for the same text.
    approved_hash: Mapped[str | None] = mapped_column(String(64), default=None)


def active(tool: Any = Tool) -> ColumnElement[bool]:
    """The catalog rows agents may find and call: not deprecated, not held for review (`tool`: Tool or an alias)."""
    return and_(tool.deprecated.is_(False), tool.held_reason.is_(None))


def held_for_review(tool: Any = Tool) -> ColumnElement[bool]:
    """The catalog rows held for an admin's review (service/catalog/holds.py): not deprecated, held."""
    return and_(tool.deprecated.is_(False), tool.held_reason.is_not(None))


class Search(Base):
    """Every /search: who asked what and what came back."""

    __tablename__ = "searches"
    __table_args__ = (
        # 0003: the statistics read the rows not counted yet, in created_at order.
        Index(
            "ix_searches_uncounted",
            "created_at",
            "id",
            sqlite_where=text("counted_at IS NULL"),
            postgresql_where=text("counted_at IS NULL"),
        ),
        # 0014: the usage signal reads the searches counted since its mark (usage/signal.py).
        Index("ix_searches_counted", "counted_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    caller: Mapped[str] = mapped_column(String(128), index=True)
    query: Mapped[str] = mapped_column(Text)
    # 0005: the caller's sorted roles; the usage signal learns each query inside this permission scope.
    scope: Mapped[str | None] = mapped_column(String(512), default=None)
    k: Mapped[int] = mapped_column(Integer)
    results: Mapped[list[Any]] = mapped_column(default=list)  # [{"name", "score"}]
    result_count: Mapped[int] = mapped_column(Integer, default=0)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    # 0002: when the first call that came from this search was counted (None: none yet).
    followed_at: Mapped[datetime | None] = mapped_column(default=None)
    # 0003: when the statistics counted this row (None: not yet, whenever it arrived).
    counted_at: Mapped[datetime | None] = mapped_column(default=None)


class Execution(Base):
    """Every call through /execute, whatever its outcome."""

    __tablename__ = "executions"
    __table_args__ = (
        Index("ix_executions_tool_started", "tool", "started_at"),
        Index("ix_executions_caller_started", "caller", "started_at"),
        # 0002: the statistics cursor reads the log in finished_at order.
        Index("ix_executions_finished_at", "finished_at"),
        # 0003: the statistics read the rows not counted yet, in finished_at order.
        Index(
            "ix_executions_uncounted",
            "finished_at",
            "id",
            sqlite_where=text("counted_at IS NULL"),
            postgresql_where=text("counted_at IS NULL"),
        ),
        # 0014: the usage signal reads the calls counted since its mark, in counted_at order (usage/signal.py).
        Index("ix_executions_counted", "counted_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    caller: Mapped[str] = mapped_column(String(128))
    tool: Mapped[str] = mapped_column(String(64))
    server_id: Mapped[str | None] = mapped_column(String(64), default=None)
    search_id: Mapped[str | None] = mapped_column(String(36), default=None, index=True)
    arguments_digest: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    status: Mapped[str] = mapped_column(String(24), index=True)
    error_class: Mapped[str | None] = mapped_column(String(128), default=None)
    error_detail: Mapped[str | None] = mapped_column(Text, default=None)
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    result_id: Mapped[str | None] = mapped_column(String(36), default=None)
    started_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    finished_at: Mapped[datetime] = mapped_column(default=utcnow)
    # 0003: when the statistics counted this row (None: not yet, whenever it arrived).
    counted_at: Mapped[datetime | None] = mapped_column(default=None)
    # 0004: the code-mode script (POST /run) that made the call; None for /execute.
    run_id: Mapped[str | None] = mapped_column(String(36), default=None, index=True)
    # 0009: the caller's sorted roles (usage.signal.scope_key); the popularity and reliability boosts are learned
    # in this permission scope. None for the rows logged before 0009: they count in no scope.
    scope: Mapped[str | None] = mapped_column(String(512), default=None)


class StoredResult(Base):
    """A full tool result kept behind a result id when the response was cut to the token budget."""

    __tablename__ = "results"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    caller: Mapped[str] = mapped_column(String(128))
    tool: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    total_tokens: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A script's return value (0013): the roles it ran with and the tools whose answers or search results it holds
    # (a JSON list).
    scope: Mapped[str | None] = mapped_column(String(512), default=None)
    tools: Mapped[str | None] = mapped_column(Text, default=None)


class ToolStats(Base):
    """Every caller's calls of each tool, refreshed incrementally from executions; the analytics read it (ranking
    reads scope_tool_stats since 0009)."""

    __tablename__ = "tool_stats"

    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    successes: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    decayed_calls: Mapped[float] = mapped_column(Float, default=0.0)
    latency_ms_avg: Mapped[float] = mapped_column(Float, default=0.0)
    last_called_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # 0002: outcomes decayed like decayed_calls (all decayed values are as of last_called_at).
    decayed_successes: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    decayed_failures: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class ScopeToolStats(Base):
    """What ranking reads (0009): tool_stats' columns per permission scope (the callers' sorted roles) and tool, so
    a caller's popularity and reliability boosts move only with the calls made in its own scope."""

    __tablename__ = "scope_tool_stats"

    scope: Mapped[str] = mapped_column(String(512), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    successes: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    decayed_calls: Mapped[float] = mapped_column(Float, default=0.0)
    decayed_successes: Mapped[float] = mapped_column(Float, default=0.0)
    decayed_failures: Mapped[float] = mapped_column(Float, default=0.0)
    latency_ms_avg: Mapped[float] = mapped_column(Float, default=0.0)
    last_called_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ScopeCallerToolStats(Base):
    """One caller's calls of a tool in one permission scope (0011): its own decayed calls, successes and failures,
    and the part of them its scope counts for the other callers (`shared_*`, capped per caller: usage/shares.py)."""

    __tablename__ = "scope_caller_tool_stats"

    scope: Mapped[str] = mapped_column(String(512), primary_key=True)
    caller: Mapped[str] = mapped_column(String(128), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    decayed_calls: Mapped[float] = mapped_column(Float, default=0.0)
    decayed_successes: Mapped[float] = mapped_column(Float, default=0.0)
    decayed_failures: Mapped[float] = mapped_column(Float, default=0.0)
    shared_calls: Mapped[float] = mapped_column(Float, default=0.0)
    shared_successes: Mapped[float] = mapped_column(Float, default=0.0)
    shared_failures: Mapped[float] = mapped_column(Float, default=0.0)
    last_called_at: Mapped[datetime | None] = mapped_column(default=None)


class CallerToolStats(Base):
    """Per-caller reuse of a tool."""

    __tablename__ = "caller_tool_stats"

    caller: Mapped[str] = mapped_column(String(128), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    successes: Mapped[int] = mapped_column(Integer, default=0)
    decayed_calls: Mapped[float] = mapped_column(Float, default=0.0)
    last_called_at: Mapped[datetime | None] = mapped_column(default=None)
    # 0002: successful calls, decayed as of last_called_at (the habit boost reads this).
    decayed_successes: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class ToolSearchStats(Base):
    """How often each tool came back from /search (0002); feeds "tools never found"."""

    __tablename__ = "tool_search_stats"

    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    appearances: Mapped[int] = mapped_column(BigInteger, default=0)
    top1: Mapped[int] = mapped_column(BigInteger, default=0)
    last_returned_at: Mapped[datetime | None] = mapped_column(default=None)


class StatsCursor(Base):
    """How far the statistics have consumed a log (incremental refresh).

    One row per log: `executions` and `searches`. Since 0003 each log row carries its own `counted_at` mark;
    the cursor keeps `rows_seen` (a version: consumers update it conditionally, so two never both commit the
    same rows, and a replica sees that another one moved the statistics) and the last position, for reading."""

    __tablename__ = "stats_cursor"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    last_started_at: Mapped[datetime | None] = mapped_column(default=None)
    last_execution_id: Mapped[str | None] = mapped_column(String(36), default=None)
    rows_seen: Mapped[int] = mapped_column(BigInteger, default=0)


class ApiKey(Base):
    """An API key, stored as a SHA-256 hash, bound to a caller and roles."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    caller: Mapped[str] = mapped_column(String(128), index=True)
    roles: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class ConsoleSession(Base):
    """A console sign-in (0008): the SHA-256 of the random id in the browser's cookie (never the id itself),
    bound to the key it was exchanged for; it acts as that key and dies with it."""

    __tablename__ = "console_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class Approval(Base):
    """A grant for one destructive call: bound to caller, tool, argument digest and expiry; usable once."""

    __tablename__ = "approvals"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    caller: Mapped[str] = mapped_column(String(128))
    tool: Mapped[str] = mapped_column(String(64))
    arguments_digest: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending | granted | used | expired
    requested_at: Mapped[datetime] = mapped_column(default=utcnow)
    granted_by: Mapped[str | None] = mapped_column(String(128), default=None)
    granted_at: Mapped[datetime | None] = mapped_column(default=None)
    expires_at: Mapped[datetime] = mapped_column()
    used_at: Mapped[datetime | None] = mapped_column(default=None)
    # 0002: the arguments to approve, so that an approver sees what the call will do.
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)


class CatalogChange(Base):
    """The catalog's change sequence: one row per committed change, written in the change's transaction.

    Replicas follow it (woken by a Redis event, or by polling) to keep their name directory, permission
    snapshot, tool cache and embedded index in step; `names` are the qualified names whose rows changed."""

    __tablename__ = "catalog_changes"

    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))  # tools | server_added | server_removed
    server_id: Mapped[str | None] = mapped_column(String(64), default=None)
    names: Mapped[list[Any]] = mapped_column(default=list)
    origin: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ToolVectors(Base):
    """Dense vectors of a tool's fields per content hash and embedder, so no replica embeds a tool twice."""

    __tablename__ = "tool_vectors"

    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    dimension: Mapped[int] = mapped_column(Integer)
    vectors: Mapped[bytes] = mapped_column(LargeBinary)  # float32 little-endian, fields in DENSE_FIELDS order
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
