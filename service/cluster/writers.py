"""One writer per upstream server: the replica holding a PostgreSQL advisory lock syncs its tools/list.

Every replica connects to every server (each keeps its own session to call it), but only the lock holder
writes the server's listing into the catalog, so two replicas never race to mark each other's tools deprecated.
Locks are session-level, held on one dedicated connection: a replica that dies releases them with its
connection, and another replica claims them on its next round. SQLite means one process: always the writer."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

logger = logging.getLogger(__name__)

LOCK_NAMESPACE = 0x7453  # first key of the two-key advisory locks: "Ts", so other lock users cannot collide


class ServerWriters:
    """The servers whose catalog this replica writes."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.shared = engine.dialect.name == "postgresql"
        self._connection: AsyncConnection | None = None
        self._held: set[str] = set()
        self._lock = asyncio.Lock()

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    async def _connect(self) -> AsyncConnection:
        if self._connection is None:
            connection = await self.engine.connect()
            self._connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
        return self._connection

    async def _reset(self, exc: BaseException) -> None:
        logger.warning("the advisory-lock connection failed (%s); this replica writes no server for now", exc)
        self._held.clear()  # a lost connection lost its locks with it
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
        self._connection = None

    async def claim(self, server_id: str) -> bool:
        """Whether this replica writes the server's catalog, taking the lock if it is free."""
        if not self.shared or server_id in self._held:
            return True
        async with self._lock:
            try:
                connection = await self._connect()
                got = await connection.scalar(
                    text("SELECT pg_try_advisory_lock(:ns, hashtext(:server))"),
                    {"ns": LOCK_NAMESPACE, "server": server_id},
                )
            except (SQLAlchemyError, OSError) as exc:
                await self._reset(exc)
                return False
            if got:
                self._held.add(server_id)
                logger.info("this replica now writes the catalog of server %s", server_id)
            return bool(got)

    async def release(self, server_id: str) -> None:
        """Give up a server (it was removed)."""
        if not self.shared or server_id not in self._held:
            return
        async with self._lock:
            self._held.discard(server_id)
            if self._connection is None:
                return
            try:
                await self._connection.execute(
                    text("SELECT pg_advisory_unlock(:ns, hashtext(:server))"),
                    {"ns": LOCK_NAMESPACE, "server": server_id},
                )
            except (SQLAlchemyError, OSError) as exc:
                await self._reset(exc)

    async def close(self) -> None:
        """Release every lock (closing the connection does)."""
        self._held.clear()
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
            self._connection = None
