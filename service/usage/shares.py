"""Each caller's part in what its permission scope learns: the scope's popularity and reliability are shared by
every caller of the same roles, so one caller could otherwise sink a tool for all of them (40 calls with arguments
that do not fit) or raise one. A call counts for the other callers with the weight
`clamp(shared_calls_per_caller - the caller's own decayed calls of the tool, 0, 1)`, so a caller's part of a tool
in its scope never exceeds `shared_calls_per_caller` decayed calls; for the caller itself its own calls count in
full (a key serving a whole agent fleet still learns from all of its calls). `scope_tool_stats` holds the shared
(capped) sums, `scope_caller_tool_stats` each caller's own and shared values, and a caller's view of a tool is
`shared - its shared part + its own`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import ScopeCallerToolStats
from service.settings import LearningSettings
from service.usage.decay import Decayed
from service.usage.rollups import SUCCESS, as_utc

INVALID_ARGUMENTS = "invalid_arguments"


@dataclass
class ShareRow:
    """A `scope_caller_tool_stats` row as plain data: decayed values as of `last_called_at`."""

    scope: str
    caller: str
    tool: str
    decayed_calls: float = 0.0
    decayed_successes: float = 0.0
    decayed_failures: float = 0.0
    shared_calls: float = 0.0
    shared_successes: float = 0.0
    shared_failures: float = 0.0
    last_called_at: datetime | None = None

    @property
    def values(self) -> list[float]:
        """Own calls, successes, failures, then their shared parts."""
        return [
            self.decayed_calls,
            self.decayed_successes,
            self.decayed_failures,
            self.shared_calls,
            self.shared_successes,
            self.shared_failures,
        ]


def shared_weight(own_calls: float, status: str, settings: LearningSettings) -> float:
    """How much a call counts for the other callers of the scope, given the caller's decayed calls of the tool
    before it."""
    if status == INVALID_ARGUMENTS and not settings.share_invalid_arguments:
        return 0.0
    return max(0.0, min(1.0, settings.shared_calls_per_caller - own_calls))


def fold_share(share: ShareRow, row: Any, failed: bool, settings: LearningSettings) -> float:
    """Count one call in its caller's row; returns the weight it has for the other callers."""
    at = as_utc(row.started_at)
    decayed = Decayed(share.values, as_utc(share.last_called_at) if share.last_called_at else None)
    weight = shared_weight(decayed.at(at, settings.half_life_days)[0] if decayed.ref else 0.0, row.status, settings)
    ok = float(row.status in SUCCESS)
    decayed.add(at, (1.0, ok, float(failed), weight, weight * ok, weight * float(failed)), settings.half_life_days)
    (
        share.decayed_calls,
        share.decayed_successes,
        share.decayed_failures,
        share.shared_calls,
        share.shared_successes,
        share.shared_failures,
    ) = decayed.values
    share.last_called_at = decayed.ref
    return weight


def own_view(shared: list[float], own: list[float]) -> list[float]:
    """A caller's view of a tool: the scope's shared (calls, successes, failures), its own shared part taken out
    and its own values put in (all decayed to the same time); `own` is ShareRow.values decayed."""
    return [max(0.0, s - part + mine) for s, part, mine in zip(shared, own[3:], own[:3], strict=True)]


async def load_share_rows(session: AsyncSession, keys: Iterable[tuple[str, str, str]] | None = None) -> list[ShareRow]:
    """scope_caller_tool_stats rows (of these (scope, caller, tool) keys, or all)."""
    table = ScopeCallerToolStats.__table__
    if keys is None:
        return [ShareRow(**row._mapping) for row in (await session.execute(select(table))).all()]
    wanted, rows = sorted(keys), []
    for start in range(0, len(wanted), 500):  # a row-value IN list of thousands overflows PostgreSQL's stack
        chunk = wanted[start : start + 500]
        query = select(table).where(tuple_(table.c.scope, table.c.caller, table.c.tool).in_(chunk))
        rows.extend(ShareRow(**row._mapping) for row in (await session.execute(query)).all())
    return rows
