"""The catalog's change sequence (SQL repository functions: they take a session and never commit)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import CatalogChange

TOOLS = "tools"  # rows of these tools changed (created, updated, deprecated or deleted)
SERVER_ADDED = "server_added"
SERVER_REMOVED = "server_removed"


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
