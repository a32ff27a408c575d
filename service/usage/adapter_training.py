"""Training the per-scope query maps (usage/adapter.py) in the background, from the usage signal's evidence.

The evidence is the usage signal's (usage/signal.py): per scope and tool the latest queries that led to a successful
call, each with its caller. A map trains on distinct query texts, each with every tool it led to. Per caller: a map is
a caller's own, trained on its own queries in the scope only, once it has `adapter_min_queries` distinct ones (for
the `adapter_own_maps` callers of the scope with the most); other callers' evidence never trains it (it reaches the
caller through the usage signal and the boosts, each capped per caller), so one caller's flood moves no one else's
ranking through a map. Measured before this choice: a shared map that every caller fed with its latest 4 requests
(as the usage signal reads other callers), one caller a third of it, moved another caller's scores by -0.54 and
+0.56 and swapped its first two results in 1 of 2 runs (docs/quality-history.md). A scope's maps train over the tools
its roles may use only (their softmax, their positives) and on the usage signal's vectors of its own queries only.

Retrained when the scope's evidence grew by `adapter_retrain_growth` since; on a worker thread (numpy, one BLAS
thread), one map after the other, each within `adapter_train_seconds`, on the latest `adapter_max_queries`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from indexer.index.base import SearchFilter
from service.policy.callers import Caller
from service.resources import Resources
from service.settings import LearningSettings
from service.usage.adapter import ScopeMaps, Trained, TrainingSet, mixed_fields, train_map
from service.usage.signal import ToolUsage, UsageVectors

logger = logging.getLogger(__name__)


@dataclass
class Example:
    """One distinct query: when it was last used, its vector, the tools it led to."""

    at: datetime
    vector: np.ndarray
    tools: set[str]


def examples_for(scoped: dict[str, ToolUsage], caller: str, limit: int) -> list[Example]:
    """The distinct queries of `caller` in the scope (its own only), oldest first, the latest `limit`."""
    own: dict[str, Example] = {}
    for tool, usage in scoped.items():
        if usage.vectors is None:
            continue
        for i, (query, at, by) in enumerate(usage.queries):
            if by != caller:
                continue
            example = own.get(query)
            if example is None:
                own[query] = Example(at, usage.vectors[i], {tool})
            else:
                example.at = max(example.at, at)
                example.tools.add(tool)
    return [own[q] for q in sorted(own, key=lambda q: (own[q].at, q))][-limit:]


def own_counts(scoped: dict[str, ToolUsage]) -> dict[str, int]:
    """Each caller's distinct queries in the scope."""
    seen: dict[str, set[str]] = {}
    for usage in scoped.values():
        for query, _, caller in usage.queries:
            seen.setdefault(caller, set()).add(query)
    return {caller: len(queries) for caller, queries in seen.items()}


def due_maps(scoped: dict[str, ToolUsage], maps: ScopeMaps, seen: int, s: LearningSettings) -> dict[str, list[Example]]:
    """The maps of a scope to (re)train now (per caller) and their examples; drops the maps of callers no longer
    among the `adapter_own_maps` with the most queries."""
    counts = own_counts(scoped)
    owners = sorted((c for c, n in counts.items() if n >= s.adapter_min_queries), key=lambda c: (-counts[c], c))
    owners = owners[: s.adapter_own_maps]
    for gone in set(maps.own) - set(owners):
        del maps.own[gone]
        maps.trained_at.pop(gone, None)
    due: dict[str, list[Example]] = {}
    for caller in owners:
        then = maps.trained_at.get(caller)
        if then is None or seen >= then * (1.0 + s.adapter_retrain_growth):
            due[caller] = examples_for(scoped, caller, s.adapter_max_queries)
    return due


def train_scope(
    pool: Any,
    where: SearchFilter,
    allowed: list[str],
    with_history: list[str],
    due: dict[str, list[Example]],
    weights: dict[str, float],
    centre: float,
    s: LearningSettings,
) -> tuple[list[str], np.ndarray, dict[str, Trained]]:
    """On a worker thread: the scope's centred field vectors (its allowed tools), each due map trained over them;
    returns the tools with history, their field vectors and the trainings."""
    names, fields = pool.centred_fields(allowed, where, centre)
    row = {name: i for i, name in enumerate(names)}
    docs = mixed_fields(fields, weights)
    out: dict[str, Trained] = {}
    for key, examples in due.items():
        kept = [(e.vector, np.array(sorted(row[t] for t in e.tools if t in row))) for e in examples]
        kept = [(vector, rows) for vector, rows in kept if len(rows)]
        if len(kept) < s.adapter_min_queries:
            continue
        data = TrainingSet(np.stack([v for v, _ in kept]).astype(np.float32), [r for _, r in kept], docs)
        out[key] = train_map(data, s.adapter_train_seconds)
    known = [name for name in with_history if name in row]
    return known, fields[[row[name] for name in known]], out


def permitted(resources: Resources, scope: str) -> SearchFilter:
    """The filter of the scope's roles (what its callers' searches see, and what the centring means are of)."""
    from service.policy.service import permission_filter  # the policy imports the search, which imports this

    roles = frozenset(r for r in scope.split(",") if r)
    return permission_filter(resources, Caller("query-adapter", roles), SearchFilter())


async def refresh_maps(
    resources: Resources,
    usage: UsageVectors,
    wait: bool = False,
    scope_filter: Callable[[str], SearchFilter] | None = None,
) -> None:
    """Start training the due maps (one training at a time), or with `wait` train them now; `scope_filter` gives a
    scope's filter (default: its roles' permissions)."""
    s = resources.settings.learning
    pool = getattr(resources.index, "pool", None)
    if not (s.enabled and s.query_adapter_enabled) or pool is None or not hasattr(pool, "centred_fields"):
        return  # an index that cannot hand its field vectors (a Qdrant server) gets no maps
    if usage.training is not None and not usage.training.done():
        if not wait:
            return
        await usage.training
    filter_of = scope_filter or (lambda scope: permitted(resources, scope))
    task = asyncio.ensure_future(_train_due(resources, usage, pool, filter_of))
    task.add_done_callback(_report_failure)
    usage.training = task
    if wait:
        await task


def _report_failure(task: asyncio.Future[None]) -> None:
    """A training that failed is logged (it is tried again once the scope has new evidence)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("query adapter: training failed", exc_info=task.exception())


async def _train_due(
    resources: Resources, usage: UsageVectors, pool: Any, scope_filter: Callable[[str], SearchFilter]
) -> None:
    s = resources.settings.learning
    search = resources.settings.search
    weights = {"name": search.weight_name, "description": search.weight_description, "params": search.weight_params}
    for scope, scoped in list(usage.by_scope.items()):
        seen = usage.added.get(scope, 0)
        if usage.maps_checked.get(scope) == seen:
            continue  # no new evidence since the last look: spare the walk over the scope's queries
        usage.maps_checked[scope] = seen
        maps = usage.maps.get(scope) or ScopeMaps()
        due = due_maps(scoped, maps, seen, s)
        if not due:
            continue
        where = scope_filter(scope)
        allowed = sorted(where.allowed) if where.allowed is not None else resources.retriever.directory.names()  # type: ignore[union-attr]
        with_history = sorted(name for name in scoped if where.allowed is None or name in where.allowed)
        known, fields, trained = await asyncio.to_thread(
            train_scope, pool, where, allowed, with_history, due, weights, search.centre_fields, s
        )
        maps.names, maps.fields = {name: i for i, name in enumerate(known)}, fields
        for key, result in trained.items():
            maps.trained_at[key] = seen
            maps.report[key] = result
            if result.matrix is not None:
                maps.own[key] = result.matrix
            else:
                maps.own.pop(key, None)
            logger.debug(
                "query adapter: scope %r map %r trained on %d queries in %.1f s (held-out R@5 %.3f -> %.3f)",
                scope, key, result.examples, result.seconds, result.held_base, result.held_best,
            )  # fmt: skip
        usage.maps[scope] = maps
