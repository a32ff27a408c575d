"""The execution log: one row per call, whatever its outcome, written so that none is lost.

Calls hand their row to `ExecutionLog.record`, which never blocks and never drops: rows wait in memory and
one writer task inserts them in batches (one multi-row INSERT per batch). Two durabilities:

- "commit" (the default): `record` returns a future the call awaits before it answers; the writer takes
  whatever is pending when it is free (group commit), so an answered call has its row committed. While the
  database is down, each batch is fsync'd to the spill file instead (durable too) and the calls go on.
- "batched": the call answers at once; rows linger up to `LINGER_SECONDS` for company, so a crash loses the rows
  still in memory. While the database is down, batches go to the spill file as in commit mode: held in memory and
  retried, 31,000 rows of 10 s of calls were all kept there (unbounded, with the search log's 124 MB).

Either way the database is tried again after a doubling wait (service/db/outage.py, shared with the search log).

A row the database refuses on its own is set aside in the spill file, and so is everything still pending
when a shutdown finds the database down. The spill file (service/db/spill.py) is replayed at the next start,
and as soon as the database is back when rows were spilled because it was down (tried after each backoff wait
even when no call comes: the next call's batch is not waited for). In a shared spill folder the
writer also replays, within seconds, the files of replicas that are gone (one killed during an outage of its own)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
from sqlalchemy import Table, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from service.db.models import Execution
from service.db.outage import Outage
from service.db.spill import SpillFile

logger = logging.getLogger(__name__)

BATCH_SIZE = 500
# Batched mode: rows wait this long for company before a write, so a trickle of calls costs one INSERT per interval.
LINGER_SECONDS = 0.05
CLOSE_ATTEMPTS = 3
Durability = Literal["commit", "batched"]
# Column sizes of `executions`: PostgreSQL refuses longer strings, so rows are fitted before they queue.
_LIMITS = {
    "caller": 128,
    "tool": 64,
    "server_id": 64,
    "search_id": 36,
    "arguments_digest": 64,
    "status": 24,
    "error_class": 128,
    "result_id": 36,
    "run_id": 36,
    "scope": 512,
}


def fit_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every string cut to its column's size, NUL replaced (PostgreSQL text cannot hold it, and an
    upstream's error message may: its row was refused and set aside in the spill file for good)."""
    fitted = dict(row)
    fitted.setdefault("run_id", None)  # rows spilled before code mode have no run id
    fitted.setdefault("scope", None)  # nor rows spilled before 0009 a scope: they count in none
    for key, value in fitted.items():
        if isinstance(value, str) and "\x00" in value:
            fitted[key] = value.replace("\x00", "\ufffd")
    for key, limit in _LIMITS.items():
        value = fitted.get(key)
        if isinstance(value, str) and len(value) > limit:
            fitted[key] = value[:limit]
    return fitted


class ExecutionLog:
    """Group-committed (or batched), loss-free writer of `executions` rows."""

    def __init__(
        self,
        session_factory: Callable[[], AsyncSession],
        spill_path: Path,
        durability: Durability = "commit",
        write_timeout_seconds: float | None = None,
        shared_spill: bool = False,
    ) -> None:
        self._session_factory = session_factory
        # A batch the database leaves unanswered this long fails like a refused one (spilled in commit mode): a
        # stalled server or a partition would otherwise hold every call's answer, and a shutdown, until the kernel
        # gives up on the connection.
        self.write_timeout_seconds = write_timeout_seconds
        self.spill = SpillFile(spill_path, BATCH_SIZE, shared=shared_spill)
        self.spill_path = self.spill.path
        self.durable = durability == "commit"
        self._pending: deque[tuple[dict[str, Any], asyncio.Future[None] | None]] = deque()
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Condition()
        self._recorded = 0
        self._settled = 0  # written or spilled
        self._closing = False
        self._closed = False
        self._flushing = 0
        self._flush_requested = asyncio.Event()
        self.outage = Outage("execution log")
        self._retry_at = 0.0  # until then the database is known down and batches go to the spill file
        self._replay_due = False
        self._connection: AsyncConnection | None = None
        self.written = 0
        self.spilled = 0
        self.failures = 0
        self.batches = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def record(self, row: dict[str, Any]) -> asyncio.Future[None] | None:
        """Queue one row; returns at once. In commit mode, the future is done when the row is durable.

        After close, the row goes straight to the spill file (durable on return)."""
        if self._closed:
            self._spill_rows([fit_row(row)])
            return None
        waiter = asyncio.get_running_loop().create_future() if self.durable else None
        self._pending.append((fit_row(row), waiter))
        self._recorded += 1
        self._wakeup.set()
        return waiter

    async def start(self) -> None:
        """Replay rows spilled by an earlier run (the writer itself runs under `run`)."""
        try:
            await self.spill.replay(self._insert_replayed)
        except (SQLAlchemyError, OSError) as exc:
            logger.error("execution log: replaying %s failed (%s); it is kept for the next start", self.spill_path, exc)
            self._replay_due = True

    async def flush(self, wait_seconds: float | None = None) -> bool:
        """Wait until every row recorded so far is written (or spilled). False on timeout."""
        target = self._recorded
        self._flushing += 1
        self._flush_requested.set()
        self._wakeup.set()
        try:
            with anyio.move_on_after(wait_seconds):
                async with self._progress:
                    await self._progress.wait_for(lambda: self._settled >= target)
                return True
            return False
        finally:
            self._flushing -= 1
            if not self._flushing:
                self._flush_requested.clear()

    async def close(self, writer: asyncio.Task[Any] | None = None) -> None:
        """Write what is pending (a few attempts), spill the rest, stop the writer."""
        self._closing = True
        self._flush_requested.set()
        self._wakeup.set()
        if writer is not None:
            await asyncio.gather(writer, return_exceptions=True)
        if self._pending:
            self._spill_rows([row for row, _ in self._pending])
            self._settle(len(self._pending))
        self._closed = True
        if self._connection is not None:
            with contextlib.suppress(Exception), anyio.move_on_after(self.write_timeout_seconds):
                await self._connection.close()
            self._connection = None
        await self._notify()

    async def run(self) -> None:
        """The writer: runs until close; restarted by its supervisor after an unexpected error."""
        while True:
            if time.monotonic() >= self._retry_at and self.spill.orphans_waiting():
                await self._replay_now()  # a replica that is gone left answered calls in the shared folder
            if self._replay_due and not self._pending and time.monotonic() >= self._retry_at:
                await self._replay_now()  # no call came since the outage: the database is tried with these
            if not self._pending:
                if self._closing:
                    return
                wait = self.spill.look_seconds
                if self._replay_due:
                    wait = max(0.0, min(wait or float("inf"), self._retry_at - time.monotonic()))
                with anyio.move_on_after(wait):
                    await self._wakeup.wait()
                self._wakeup.clear()
                continue
            if not self.durable and len(self._pending) < BATCH_SIZE and not (self._closing or self._flushing):
                with anyio.move_on_after(LINGER_SECONDS):
                    await self._flush_requested.wait()
            if not await self._write_batch():
                return

    async def _write_batch(self) -> bool:
        """Write (or spill) the next batch; False when the writer must stop."""
        size = min(BATCH_SIZE, len(self._pending))
        rows = [self._pending[i][0] for i in range(size)]
        if time.monotonic() < self._retry_at:
            await self._spill_settle(rows, "database down")
            return True
        try:
            await self._insert(rows)
        except (IntegrityError, DataError):
            self.failures += 1
            await self._insert_one_by_one(rows)  # a row of the batch is refused on its own: set it aside
            self._settle(size)
            await self._notify()
            return True
        except (SQLAlchemyError, OSError) as exc:
            return await self._on_failure(rows, exc)
        self.outage.wrote(caught_up=len(self._pending) == size)
        self._retry_at = 0.0
        self.written += size
        self.batches += 1
        self._settle(size)
        await self._notify()
        if self._replay_due:
            await self._replay_now()
        return True

    async def _on_failure(self, rows: list[dict[str, Any]], exc: BaseException) -> bool:
        delay = self.outage.failed()
        self.failures += 1
        if self._closing and self.outage.failures >= CLOSE_ATTEMPTS:
            logger.error(
                "execution log: database unavailable at shutdown (%s); spilling %d rows to %s",
                exc,
                len(self._pending),
                self.spill_path,
            )
            return False
        # On disk now, the database tried again later: in commit mode the calls wait for these rows, and in either
        # mode memory would otherwise hold every call made until the database is back.
        logger.warning("execution log: writing %d rows failed (%s); spilled, retrying in %.1f s", len(rows), exc, delay)
        self._retry_at = time.monotonic() + delay
        await self._spill_settle(rows, "database down")
        return True

    async def _spill_settle(self, rows: list[dict[str, Any]], reason: str) -> None:
        logger.debug("execution log: %d rows to %s (%s)", len(rows), self.spill_path, reason)
        self._spill_rows(rows)
        self._replay_due = True
        self._settle(len(rows))
        await self._notify()

    async def _replay_now(self) -> None:
        self._replay_due = False
        try:
            replayed = await self.spill.replay(self._insert_replayed)
        except (SQLAlchemyError, OSError) as exc:
            logger.warning("execution log: replaying %s failed (%s); will try again", self.spill_path, exc)
            self._replay_due = True
            self._retry_at = time.monotonic() + self.outage.failed()
            return
        if replayed:
            logger.info("execution log: database back, %d spilled rows written", replayed)

    def _settle(self, count: int) -> None:
        for _ in range(count):
            _, waiter = self._pending.popleft()
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        self._settled += count

    async def _notify(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        # The writer keeps one connection: no pool checkout and reset per batch (each is a round trip, and
        # with aiosqlite a thread hand-off, which a loaded machine makes expensive).
        connection = None
        try:
            with anyio.fail_after(self.write_timeout_seconds):
                connection = await self._writer_connection()
                await connection.execute(_insert_new(connection.dialect.name, Execution.__table__), rows)
                await connection.commit()
        except BaseException:
            self._connection = None
            if connection is not None:
                with contextlib.suppress(Exception), anyio.move_on_after(1):
                    await connection.invalidate()  # not close(): its rollback would wait on the same server
            raise

    async def _writer_connection(self) -> AsyncConnection:
        if self._connection is None or self._connection.closed:
            session = self._session_factory()
            try:
                bind = session.bind
            finally:
                await session.close()
            assert isinstance(bind, AsyncEngine), "the execution log needs sessions bound to an async engine"
            self._connection = await bind.connect()
        return self._connection

    async def _insert_replayed(self, rows: list[dict[str, Any]]) -> None:
        rows = [fit_row(row) for row in rows]  # a row set aside by an earlier version (NUL) lands now
        try:
            await self._insert(rows)
            self.written += len(rows)
        except (IntegrityError, DataError):
            await self._insert_one_by_one(rows)

    async def _insert_one_by_one(self, rows: list[dict[str, Any]]) -> None:
        refused = []
        for row in rows:
            try:
                await self._insert([row])
                self.written += 1
            except IntegrityError:
                if not await self._exists(row["id"]):
                    refused.append(row)
            except (DataError, OSError) as exc:
                logger.error("execution log: row %s refused (%s); kept in %s", row.get("id"), exc, self.spill_path)
                refused.append(row)
        if refused:
            self._spill_rows(refused)

    async def _exists(self, execution_id: str) -> bool:
        async with self._session_factory() as session:
            return (await session.scalar(select(Execution.id).where(Execution.id == execution_id))) is not None

    def _spill_rows(self, rows: list[dict[str, Any]]) -> None:
        self.spill.append(rows)
        self.spilled += len(rows)


def _insert_new(dialect: str, table: Table) -> Any:
    """INSERT that skips ids already stored (a replayed spill may hold rows written before a crash)."""
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=["id"])
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=["id"])
    return insert(table)
