"""The execution log: one row per call, whatever its outcome, written so that none is lost.

Calls hand their row to `ExecutionLog.record`, which never blocks and never drops: rows wait in memory and
one writer task inserts them in batches (one multi-row INSERT per batch). A failing database is retried with
backoff; a row the database refuses on its own is set aside in a spill file, and so is everything still
pending when a shutdown finds the database down. The spill file (JSON lines, under the data folder) is
replayed at the next start, so every row reaches the table eventually."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy import insert, select
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import Execution

logger = logging.getLogger(__name__)

BATCH_SIZE = 500
# Rows wait this long for company before a write, so a steady trickle of calls costs one INSERT per interval.
LINGER_SECONDS = 0.05
RETRY_INITIAL_SECONDS = 0.2
RETRY_MAX_SECONDS = 10.0
CLOSE_ATTEMPTS = 3
_DATETIME_FIELDS = ("started_at", "finished_at")
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
}


def fit_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every string cut to its column's size."""
    fitted = dict(row)
    for key, limit in _LIMITS.items():
        value = fitted.get(key)
        if isinstance(value, str) and len(value) > limit:
            fitted[key] = value[:limit]
    return fitted


class ExecutionLog:
    """Batched, loss-free writer of `executions` rows."""

    def __init__(self, session_factory: Callable[[], AsyncSession], spill_path: Path) -> None:
        self._session_factory = session_factory
        self.spill_path = spill_path
        self._pending: deque[dict[str, Any]] = deque()
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Condition()
        self._recorded = 0
        self._settled = 0  # written or spilled
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._flushing = 0
        self._flush_requested = asyncio.Event()
        self.written = 0
        self.spilled = 0
        self.failures = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def record(self, row: dict[str, Any]) -> None:
        """Queue one row; returns at once. After close, the row goes straight to the spill file."""
        if self._closed:
            self._spill([fit_row(row)])
            return
        self._pending.append(fit_row(row))
        self._recorded += 1
        self._wakeup.set()

    async def start(self) -> None:
        """Replay rows spilled by an earlier run, then start the writer."""
        await self._replay_spill()
        self._task = asyncio.create_task(self._run(), name="execution-log")

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

    async def close(self) -> None:
        """Write what is pending (a few attempts), spill the rest, stop the writer."""
        self._closing = True
        self._flush_requested.set()
        self._wakeup.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._pending:
            self._spill(list(self._pending))
            self._settle(len(self._pending))
        self._closed = True
        await self._notify()

    async def _run(self) -> None:
        failures = 0
        while True:
            if not self._pending:
                if self._closing:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            if len(self._pending) < BATCH_SIZE and not (self._closing or self._flushing):
                with anyio.move_on_after(LINGER_SECONDS):
                    await self._flush_requested.wait()
            batch = [self._pending[i] for i in range(min(BATCH_SIZE, len(self._pending)))]
            try:
                await self._insert(batch)
            except (SQLAlchemyError, OSError) as exc:
                failures += 1
                self.failures += 1
                if isinstance(exc, IntegrityError | DataError):
                    # A row of the batch is refused on its own: write them one by one, set it aside.
                    await self._insert_one_by_one(batch)
                    self._settle(len(batch))
                    await self._notify()
                    continue
                if self._closing and failures >= CLOSE_ATTEMPTS:
                    logger.error(
                        "execution log: database unavailable at shutdown (%s); spilling %d rows to %s",
                        exc,
                        len(self._pending),
                        self.spill_path,
                    )
                    return
                delay = min(RETRY_MAX_SECONDS, RETRY_INITIAL_SECONDS * 2 ** (failures - 1))
                logger.warning(
                    "execution log: writing %d rows failed (%s); retrying in %.1f s", len(batch), exc, delay
                )
                await anyio.sleep(delay)
                continue
            failures = 0
            self.written += len(batch)
            self._settle(len(batch))
            await self._notify()

    def _settle(self, count: int) -> None:
        for _ in range(count):
            self._pending.popleft()
        self._settled += count

    async def _notify(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        async with self._session_factory() as session:
            await session.execute(insert(Execution), rows)
            await session.commit()

    async def _insert_one_by_one(self, rows: list[dict[str, Any]]) -> None:
        refused = []
        for row in rows:
            try:
                await self._insert([row])
                self.written += 1
            except IntegrityError:
                if not await self._exists(row["id"]):
                    refused.append(row)
            except (SQLAlchemyError, OSError) as exc:
                logger.error(
                    "execution log: row %s refused (%s); kept in %s", row.get("id"), exc, self.spill_path
                )
                refused.append(row)
        if refused:
            self._spill(refused)

    async def _exists(self, execution_id: str) -> bool:
        async with self._session_factory() as session:
            return (
                await session.scalar(select(Execution.id).where(Execution.id == execution_id))
            ) is not None

    def _spill(self, rows: list[dict[str, Any]]) -> None:
        self.spill_path.parent.mkdir(parents=True, exist_ok=True)
        with self.spill_path.open("a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, default=_json_default, separators=(",", ":")) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.spilled += len(rows)

    async def _replay_spill(self) -> None:
        if not self.spill_path.exists():
            return
        lines = self.spill_path.read_text(encoding="utf-8").splitlines()
        rows = [_from_json(json.loads(line)) for line in lines if line.strip()]
        replaying = self.spill_path.with_suffix(".replaying")
        self.spill_path.replace(replaying)
        if rows:
            logger.info("execution log: replaying %d spilled rows from %s", len(rows), self.spill_path)
            try:
                for start in range(0, len(rows), BATCH_SIZE):
                    chunk = rows[start : start + BATCH_SIZE]
                    try:
                        await self._insert(chunk)
                    except IntegrityError:
                        await self._insert_one_by_one(chunk)
            except (SQLAlchemyError, OSError) as exc:
                logger.error("execution log: replaying the spill file failed (%s); it is kept", exc)
                replaying.replace(self.spill_path)
                return
        replaying.unlink(missing_ok=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _from_json(row: dict[str, Any]) -> dict[str, Any]:
    for key in _DATETIME_FIELDS:
        if isinstance(row.get(key), str):
            row[key] = datetime.fromisoformat(row[key])
    return row
