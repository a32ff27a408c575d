"""The catalog's change sequence (SQL repository functions: they take a session and never commit, but for
`prune_changes`, which commits each batch it deletes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import CatalogChange

TOOLS = "tools"  # rows of these tools changed (created, updated, deprecated or deleted)
SERVER_ADDED = "server_added"
SERVER_REMOVED = "server_removed"
PRUNE_BATCH = 10_000  # changes deleted per statement (short transactions beside the writers)


def record_change(
    session: AsyncSession, kind: str, names: Iterable[str], *, server: str | None, origin: str
) -> CatalogChange:
    """Add a change row to the session's transaction (it commits with the change itself)."""
    row = CatalogChange(kind=kind, server_id=server, names=sorted(set(names)), origin=origin)
    session.add(row)
    return row


async def changes_after(session: AsyncSession, seq: int, limit: int = 1000) -> Sequence[CatalogChange]:
    """The committed changes after `seq`, in sequence order."""
    query = select(CatalogChange).where(CatalogChange.seq > seq).order_by(CatalogChange.seq).limit(limit)
    return (await session.scalars(query)).all()


async def last_seq(session: AsyncSession) -> int:
    """The highest committed sequence number (0 for an empty sequence)."""
    return int(await session.scalar(select(func.coalesce(func.max(CatalogChange.seq), 0))) or 0)


async def first_seq(session: AsyncSession) -> int | None:
    """The lowest sequence number still kept (None for an empty sequence)."""
    return await session.scalar(select(func.min(CatalogChange.seq)))  # type: ignore[no-any-return]


async def prune_changes(session: AsyncSession, before: datetime) -> int:
    """Delete the changes created before `before`, in batches, committing each; the latest change always stays (a
    starting replica reads its number as its watermark, and SQLite would hand the numbers out again from an empty
    table). A replica that had not followed that far compares the whole catalog instead (`CatalogFollower`).
    Returns how many were deleted."""
    top = await last_seq(session)
    cutoff = await session.scalar(
        select(func.max(CatalogChange.seq)).where(CatalogChange.created_at < before, CatalogChange.seq < top)
    )
    low = await first_seq(session)
    if cutoff is None or low is None:
        return 0
    deleted = 0
    while low <= cutoff:
        high = min(cutoff, low + PRUNE_BATCH - 1)
        result = await session.execute(delete(CatalogChange).where(CatalogChange.seq <= high))
        await session.commit()
        deleted += result.rowcount or 0  # type: ignore[attr-defined]
        low = high + 1
    return deleted
