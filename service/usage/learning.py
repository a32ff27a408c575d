"""Learning from use: bounded ranking boosts from the execution log.

`refresh_stats` folds new executions (and searches) into the statistics tables and an in-memory snapshot;
`boosts_for` reads the snapshot synchronously on every search. Three boosts, each bounded by settings:
- popularity: decayed calls of the tool in the caller's permission scope (its sorted roles, as the usage
  signal), saturating (`d / (d + popularity_half_calls)`);
- reliability: a penalty once the smoothed (Beta prior), decayed failure rate of the tool's calls in the
  caller's scope passes a tolerance (tool errors, timeouts, upstream errors and arguments that do not fit
  count as failures);
- caller_habit: the caller's own decayed successful calls of the tool, saturating.
A scope never reads another scope's calls (a caller of other roles could otherwise read, in its scores, how
much and how badly others use the tools it shares with them), and inside a scope each other caller's part is capped
(usage/shares.py) while the caller's own calls count in full. A tool with no history gets no boost and is never
pushed down: a new tool whose text match leads by more
than max_popularity_boost + max_caller_boost stays first. The bounds are tuned with `toolscout bench
learning` (the fused scores' gaps are mostly 0.3-2, so much smaller boosts would change nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.exc import IntegrityError, OperationalError

from service.db.models import StatsCursor, utcnow
from service.errors import counted
from service.resources import Resources
from service.settings import LearningSettings
from service.usage.adapter_training import refresh_maps
from service.usage.shares import ShareRow, load_share_rows, own_view
from service.usage.signal import UsageVectors, refresh_usage
from service.usage.stats import (
    EXECUTIONS_CURSOR,
    ConsumeReport,
    Decayed,
    HabitRow,
    ScopeToolRow,
    as_utc,
    consume_executions,
    consume_searches,
    load_habit_rows,
    load_scope_tool_rows,
)

logger = logging.getLogger(__name__)

REFRESH_TASK = "usage-statistics"


@dataclass
class ToolHistory:
    """Decayed calls, successes and failures of one tool as of `ref`, and its latency."""

    decayed: Decayed
    latency_ms: float = 0.0


@dataclass
class Snapshot:
    """What boosts_for reads: each scope's history of each tool and each caller's reuse of tools (one entry per
    distinct role set and tool used in it, per caller and tool used)."""

    scopes: dict[str, dict[str, ToolHistory]] = field(default_factory=lambda: defaultdict(dict))
    habits: dict[str, dict[str, Decayed]] = field(default_factory=lambda: defaultdict(dict))
    # scope -> (caller, tool) -> the caller's own and shared values (usage/shares.py)
    shares: dict[str, dict[tuple[str, str], Decayed]] = field(default_factory=lambda: defaultdict(dict))
    rows_seen: int = -1  # the executions cursor this snapshot reflects

    def put_tool(self, row: ScopeToolRow) -> None:
        ref = as_utc(row.last_called_at) if row.last_called_at else None
        values = [row.decayed_calls, row.decayed_successes, row.decayed_failures]
        self.scopes[row.scope][row.tool] = ToolHistory(Decayed(values, ref), row.latency_ms_avg)

    def put_share(self, row: ShareRow) -> None:
        ref = as_utc(row.last_called_at) if row.last_called_at else None
        self.shares[row.scope][(row.caller, row.tool)] = Decayed(row.values, ref)

    def put_habit(self, row: HabitRow) -> None:
        ref = as_utc(row.last_called_at) if row.last_called_at else None
        self.habits[row.caller][row.tool] = Decayed([row.decayed_calls, row.decayed_successes], ref)


def popularity_boost(decayed_calls: float, settings: LearningSettings) -> float:
    """Saturating in the decayed number of calls; at most max_popularity_boost."""
    if decayed_calls <= 0:
        return 0.0
    return settings.max_popularity_boost * decayed_calls / (decayed_calls + settings.popularity_half_calls)


def smoothed_failure_rate(successes: float, failures: float, settings: LearningSettings) -> float:
    """Failure rate under a Beta prior: `reliability_prior_weight` calls at `reliability_prior_success`."""
    weight = settings.reliability_prior_weight
    prior_failures = weight * (1.0 - settings.reliability_prior_success)
    return (failures + prior_failures) / (successes + failures + weight)


def reliability_penalty(successes: float, failures: float, settings: LearningSettings) -> float:
    """0 up to the tolerated failure rate, then linear down to -max_reliability_penalty at always failing."""
    rate = smoothed_failure_rate(successes, failures, settings)
    tolerance = settings.reliability_tolerance
    excess = max(0.0, min(1.0, (rate - tolerance) / (1.0 - tolerance)))
    return -settings.max_reliability_penalty * excess


def habit_boost(decayed_successes: float, settings: LearningSettings) -> float:
    """Saturating in the caller's decayed successful calls of the tool; at most max_caller_boost."""
    if decayed_successes <= 0:
        return 0.0
    return settings.max_caller_boost * decayed_successes / (decayed_successes + settings.habit_half_calls)


def compute_boosts(
    snapshot: Snapshot,
    caller_id: str,
    scope: str | None,
    names: list[str],
    settings: LearningSettings,
    now: datetime,
) -> dict[str, dict[str, float]]:
    """The boosts of each name for this caller, in its scope, at `now` (an empty dict for a tool without history
    there); without a scope, the caller's habit only."""
    half_life = settings.half_life_days
    habits = snapshot.habits.get(caller_id, {})
    tools = snapshot.scopes.get(scope, {}) if scope is not None else {}
    shares = snapshot.shares.get(scope, {}) if scope is not None else {}
    out: dict[str, dict[str, float]] = {}
    for name in names:
        boosts: dict[str, float] = {}
        history = tools.get(name)
        if history is not None:
            calls, successes, failures = history.decayed.at(now, half_life)
            mine = shares.get((caller_id, name))
            if mine is not None:
                calls, successes, failures = own_view([calls, successes, failures], mine.at(now, half_life))
            popularity = popularity_boost(calls, settings)
            if popularity > 1e-6:
                boosts["popularity"] = round(popularity, 6)
            penalty = reliability_penalty(successes, failures, settings)
            if penalty < -1e-6:
                boosts["reliability"] = round(penalty, 6)
        habit = habits.get(name)
        if habit is not None:
            _calls, reused = habit.at(now, half_life)
            boost = habit_boost(reused, settings)
            if boost > 1e-6:
                boosts["caller_habit"] = round(boost, 6)
        out[name] = boosts
    return out


class LearningState:
    """The snapshot, the lock that serialises refreshes and the background task."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


def learning_state(resources: Resources) -> LearningState:
    """The app's learning state, created on first use."""
    if resources.learning is None:
        resources.learning = LearningState()
    return resources.learning


def boosts_for(
    resources: Resources, caller_id: str, scope: str | None, qualified_names: list[str]
) -> dict[str, dict[str, float]]:
    """Additive, bounded score boosts per name for this caller in its permission scope (usage.signal.scope_key),
    from the in-memory snapshot."""
    settings = resources.settings.learning
    if not settings.enabled:
        return {name: {} for name in qualified_names}
    snapshot = learning_state(resources).snapshot
    return compute_boosts(snapshot, caller_id, scope, qualified_names, settings, utcnow())


async def _load_snapshot(resources: Resources) -> Snapshot:
    snapshot = Snapshot()
    async with resources.session() as session:
        cursor = await session.get(StatsCursor, EXECUTIONS_CURSOR)
        snapshot.rows_seen = cursor.rows_seen if cursor is not None else 0
        for tool in await load_scope_tool_rows(session):
            snapshot.put_tool(tool)
        for habit in await load_habit_rows(session):
            snapshot.put_habit(habit)
        for share in await load_share_rows(session):
            snapshot.put_share(share)
    return snapshot


async def refresh_stats(resources: Resources) -> int:
    """Consume the executions (and searches) logged since the cursor; returns the executions consumed.

    Cheap when nothing is new: one cursor read and one indexed range query per log."""
    state = learning_state(resources)
    settings = resources.settings.learning
    consumed = 0
    async with state.lock:
        async with resources.session() as session:
            cursor = await session.get(StatsCursor, EXECUTIONS_CURSOR)
            seen = cursor.rows_seen if cursor is not None else 0
        if seen != state.snapshot.rows_seen:
            # Another process (or a first start) moved the cursor: read the statistics it wrote.
            state.snapshot = await _load_snapshot(resources)
        for consume in (consume_executions, consume_searches):
            more = True
            while more:
                report = ConsumeReport()
                try:
                    async with resources.session() as session:
                        more = await consume(session, settings, report)
                        if report.lost_race:
                            await session.rollback()
                        else:
                            await session.commit()
                except (IntegrityError, OperationalError) as exc:
                    # Another process created the same rows first, or (SQLite) wrote since this one read.
                    logger.debug("usage statistics: lost a race with another consumer (%s)", exc)
                    report.lost_race = True
                    more = False
                if report.lost_race:
                    state.snapshot = await _load_snapshot(resources)
                    break
                for tool in report.scope_tools:
                    state.snapshot.put_tool(tool)
                for habit in report.habits:
                    state.snapshot.put_habit(habit)
                for share in report.shares:
                    state.snapshot.put_share(share)
                consumed += report.executions
                if report.executions:
                    state.snapshot.rows_seen += report.executions
        if resources.usage is not None:
            await refresh_usage(resources, resources.usage)
            await refresh_maps(resources, resources.usage)  # starts a training on a worker thread when one is due
    return consumed


def request_refresh(resources: Resources) -> None:
    """Ask the background task to refresh soon (after an execution, for instance)."""
    learning_state(resources).wake.set()


async def _refresh_loop(resources: Resources, state: LearningState) -> None:
    """Refresh now, then every `refresh_seconds` or when woken; errors go to the supervisor (restart, backoff)."""
    settings = resources.settings.learning
    first = True
    while True:
        if not first:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.wake.wait(), timeout=settings.refresh_seconds)
                # Woken by a new execution: its row becomes consumable once past the lag.
                await asyncio.sleep(settings.refresh_lag_seconds)
        first = False
        state.wake.clear()
        consumed = await refresh_stats(resources)
        if consumed:
            logger.debug("usage statistics: %s consumed", counted(consumed, "execution"))


async def start_learning(resources: Resources) -> None:
    """Startup hook: load the statistics, install the boosts, start the background refresh (which first
    catches up with whatever the log gained while the service was down)."""
    state = learning_state(resources)
    state.snapshot = await _load_snapshot(resources)
    scopes = state.snapshot.scopes
    tools = len({tool for scoped in scopes.values() for tool in scoped})
    logger.info("usage statistics: %s with history in %s", counted(tools, "tool"), counted(len(scopes), "scope"))
    if resources.settings.learning.enabled:
        resources.boosts = lambda caller_id, scope, names: boosts_for(resources, caller_id, scope, names)
        resources.usage = UsageVectors()
        await refresh_usage(resources, resources.usage)
    state.task = resources.supervisor.start(REFRESH_TASK, lambda: _refresh_loop(resources, state))


async def stop_learning(resources: Resources) -> None:
    """Shutdown hook: stop the background refresh."""
    state = learning_state(resources)
    if state.task is not None:
        await resources.supervisor.stop(REFRESH_TASK)
        state.task = None
    training = resources.usage.training if resources.usage is not None else None
    if training is not None and not training.done():
        training.cancel()  # its worker thread ends within learning.adapter_train_seconds
        with contextlib.suppress(asyncio.CancelledError):
            await training
