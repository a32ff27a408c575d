"""Retention of the raw search and execution logs: rows older than `logs.retention_days` are deleted, in small
batches, once the statistics refresh has counted them (a row whose `counted_at` is still empty is never deleted,
whatever its age: a spill replayed late is folded first).

After the refresh has folded a row into the statistics and the rollups (usage/stats.py, rollups.py), which keep
every counted row whole, the raw rows are still read by:
- the list of unanswered searches (usage/analytics.py) and the console funnel's calls that succeeded after a search
  (console/queries.py): they cover the retention period;
- the usage signal (usage/signal.py), which rebuilds its evidence from the log at each start: per permission scope,
  tool and caller the latest `learning.usage_max_queries` successful calls from the caller's own searches. Those
  executions are never deleted: the signal's bounded sets keep each caller's latest queries only, so a restarted
  replica holds the same queries as one that read the whole log;
- the follow marks and the signal join the two logs: a search stays while an execution that names it stays.

Executions go first, then the searches no kept execution names. Each transaction deletes at most `logs.prune_batch`
rows it read, and its DELETE checks `counted_at` again. Several replicas: on PostgreSQL a transaction-level advisory
lock lets one prune at a time (another skips its turn); on SQLite the file's write lock serialises them, and a
repeated delete deletes nothing."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, or_, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.engine import LOG_PRUNE_LOCK_KEY
from service.db.models import Execution, Search, utcnow
from service.resources import Resources
from service.usage.rollups import SUCCESS

logger = logging.getLogger(__name__)

PRUNE_TASK = "prune-logs"
BATCH_PAUSE_SECONDS = 0.01  # between two transactions: the log writers and the refresh get the database in between
executions, searches = Execution.__table__, Search.__table__
E, S = executions.c, searches.c
Key = tuple[str, str, str]  # (scope, tool, caller) of the usage signal's evidence


@dataclass
class PruneReport:
    """What one pass deleted and kept."""

    executions: int = 0
    searches: int = 0
    kept_evidence: int = 0  # executions past the retention kept as the usage signal's evidence
    batches: int = 0
    batch_seconds: list[float] = field(default_factory=list)  # each transaction's wall time
    skipped: bool = False  # another replica was pruning (PostgreSQL) or held the database (SQLite)


async def _take_turn(session: AsyncSession) -> bool:
    """PostgreSQL: this transaction holds the prune's advisory lock (False: another replica prunes now)."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    return bool(await session.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": LOG_PRUNE_LOCK_KEY}))


def _after(at: Any, ident: Any, last: tuple[datetime, str] | None) -> list[Any]:
    """Keyset paging over (time, id): the rows after the last one a pass looked at (kept ones are not read again)."""
    return [] if last is None else [or_(at > last[0], and_(at == last[0], ident > last[1]))]


class Evidence:
    """The usage signal's evidence among old executions: per (scope, tool, caller), the ids of its latest
    `bound` successful calls from the caller's own searches (read once per pass)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.latest: dict[Key, set[str]] = {}
        self.kept = 0

    async def protected(self, session: AsyncSession, rows: Sequence[Any]) -> set[str]:
        """The ids of these execution rows that the usage signal reads."""
        candidates = [r for r in rows if r.status in SUCCESS and r.search_id is not None]
        if not candidates:
            return set()
        origins = {
            sid: (scope, caller)
            for sid, scope, caller in (
                await session.execute(
                    select(S.id, S.scope, S.caller).where(S.id.in_(sorted({r.search_id for r in candidates})))
                )
            ).all()
        }
        kept: set[str] = set()
        for row in candidates:
            scope, caller = origins.get(row.search_id, (None, None))
            if scope is None or caller != row.caller:
                continue  # not evidence: no scope (logged before 0005) or a call naming another caller's search
            key = (scope, row.tool, caller)
            if key not in self.latest:
                self.latest[key] = await self._latest(session, key)
            if row.id in self.latest[key]:
                kept.add(row.id)
        return kept

    async def _latest(self, session: AsyncSession, key: Key) -> set[str]:
        scope, tool, caller = key
        statement = (
            select(E.id)
            .select_from(executions.join(searches, and_(S.id == E.search_id, S.caller == E.caller)))
            .where(E.tool == tool, E.caller == caller, E.status.in_(SUCCESS), S.scope == scope)
            .order_by(E.finished_at.desc(), E.id.desc())  # the signal's order (usage/signal.py), newest first
            .limit(self.bound)
        )
        return set((await session.scalars(statement)).all())


async def _prune_executions(
    session: AsyncSession, cutoff: datetime, size: int, last: tuple[datetime, str] | None, evidence: Evidence
) -> tuple[int, int, tuple[datetime, str] | None]:
    """Delete one batch of counted executions finished before `cutoff`: (rows read, deleted, last row read); the
    rows kept as evidence are added to `evidence.kept`."""
    rows = (
        await session.execute(
            select(E.id, E.finished_at, E.tool, E.caller, E.status, E.search_id)
            .where(E.counted_at.is_not(None), E.finished_at < cutoff, *_after(E.finished_at, E.id, last))
            .order_by(E.finished_at, E.id)
            .limit(size)
        )
    ).all()
    if not rows:
        return 0, 0, last
    kept = await evidence.protected(session, rows)
    evidence.kept += len(kept)
    doomed = [r.id for r in rows if r.id not in kept]
    deleted = 0
    if doomed:
        result = await session.execute(
            delete(executions)
            .where(E.id.in_(doomed), E.counted_at.is_not(None))
            .execution_options(synchronize_session=False)
        )
        deleted = int(result.rowcount)  # type: ignore[attr-defined]
    return len(rows), deleted, (rows[-1].finished_at, rows[-1].id)


async def _prune_searches(
    session: AsyncSession, cutoff: datetime, size: int, last: tuple[datetime, str] | None
) -> tuple[int, int, tuple[datetime, str] | None]:
    """Delete one batch of counted searches created before `cutoff` that no execution names."""
    named = exists().where(E.search_id == S.id)
    rows = (
        await session.execute(
            select(S.id, S.created_at)
            .where(S.counted_at.is_not(None), S.created_at < cutoff, ~named, *_after(S.created_at, S.id, last))
            .order_by(S.created_at, S.id)
            .limit(size)
        )
    ).all()
    if not rows:
        return 0, 0, last
    result = await session.execute(
        delete(searches)
        .where(S.id.in_([r.id for r in rows]), S.counted_at.is_not(None), ~named)
        .execution_options(synchronize_session=False)
    )
    return len(rows), int(result.rowcount), (rows[-1].created_at, rows[-1].id)  # type: ignore[attr-defined]


async def prune_logs(resources: Resources, now: datetime | None = None) -> PruneReport:
    """One pass: delete the counted log rows older than the retention, a batch per transaction."""
    settings = resources.settings.logs
    report = PruneReport()
    if settings.retention_days <= 0:
        return report
    cutoff = (now or utcnow()) - timedelta(days=settings.retention_days)
    evidence = Evidence(resources.settings.learning.usage_max_queries)
    for log in ("executions", "searches"):
        last: tuple[datetime, str] | None = None
        while True:
            started = time.perf_counter()
            try:
                async with resources.session() as session:
                    if not await _take_turn(session):
                        report.skipped = True
                        return report
                    if log == "executions":
                        read, deleted, last = await _prune_executions(
                            session, cutoff, settings.prune_batch, last, evidence
                        )
                        report.executions += deleted
                        report.kept_evidence = evidence.kept
                    else:
                        read, deleted, last = await _prune_searches(session, cutoff, settings.prune_batch, last)
                        report.searches += deleted
                    await session.commit()
            except OperationalError as exc:
                if "locked" not in str(exc):  # SQLite: another process held the file past the busy timeout
                    raise
                logger.info("log retention: the database is busy (%s); next turn", exc)
                report.skipped = True
                return report
            if not read:
                break
            report.batches += 1
            report.batch_seconds.append(time.perf_counter() - started)
            await asyncio.sleep(BATCH_PAUSE_SECONDS)
    return report


async def _prune_loop(resources: Resources) -> None:
    """A pass at start, then every `logs.prune_interval_seconds`; errors go to the supervisor (restart, backoff)."""
    settings = resources.settings.logs
    while True:
        report = await prune_logs(resources)
        if report.executions or report.searches:
            logger.info(
                "log retention: deleted %d executions and %d searches older than %g days in %d batches "
                "(slowest %.3f s; %d kept as the usage signal's evidence)",
                report.executions,
                report.searches,
                settings.retention_days,
                report.batches,
                max(report.batch_seconds),
                report.kept_evidence,
            )
        await asyncio.sleep(settings.prune_interval_seconds)


async def start_retention(resources: Resources) -> None:
    """Start-up hook: prune in the background unless `logs.retention_days` is 0."""
    if resources.settings.logs.retention_days > 0:
        resources.supervisor.start(PRUNE_TASK, lambda: _prune_loop(resources))


async def stop_retention(resources: Resources) -> None:
    """Shutdown hook: stop pruning (a batch under way is rolled back)."""
    await resources.supervisor.stop(PRUNE_TASK)
