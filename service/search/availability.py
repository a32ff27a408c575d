"""Whether a search result's tool can be called now, from what the execution gateway knows of its server.

A tool is available when its server's connection in the gateway's pool is ready, or on its first way there
(installing, starting, connecting: a call waits for it), and the server does not run it only as a task. It is not
when its server has no connection (the pool's `state_without_connection`, as GET /servers shows it: `catalog` for
a catalog-only registration, `stopped` for a server with a transport that does not run here), or its connection is
in `backoff` after a failure, trying again after one (`connecting` once restarted), or `stopped`; the reason given
is that state. Nor is a tool whose server's listing says it runs only as a task (reason `task_required`: the
gateway calls tools without task augmentation). Two or three set and dict lookups per result, no I/O; the state
told is the one GET /servers already shows the caller of a server whose tools it may use (search results hold only
those), and the other is of the tool itself. Unavailable tools are never hidden (an admin may be about to fix the
server): `search.unavailable_penalty` only moves them below available tools of a near score within the k results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from service.resources import Resources
from service.search.retrieval import RankedTool, SearchOutcome
from service.upstream.pool import UpstreamPool

# States of a connection's first attempt: a call waits for it (upstream/calls.py, wait_ready).
FIRST_START_STATES = frozenset({"installing", "starting", "connecting"})

TASK_REQUIRED = "task_required"

# (server id, the server's tool name) -> None when the tool can be called now, else why not.
Unavailability = Callable[[str, str], str | None]


@dataclass
class SearchHit(RankedTool):
    """A ranked tool and whether it can be called now (None: no gateway runs in this process, so unknown)."""

    available: bool | None = None
    unavailable_reason: str | None = None  # its server's state (as GET /servers shows it), or task_required


def unavailable_reason(pool: UpstreamPool, server: str, tool: str) -> str | None:
    """None when a call of the tool goes through now (or waits for its server's first start), else why not: the
    server's state, or task_required."""
    connection = pool.get(server)
    if connection is None:
        return pool.state_without_connection(server)
    health = connection.health
    if not (health.state == "ready" or (health.state in FIRST_START_STATES and not health.restarts)):
        return health.state
    return TASK_REQUIRED if tool in connection.task_only else None


def mark_availability(resources: Resources, outcome: SearchOutcome) -> SearchOutcome:
    """The outcome with its results as SearchHits that say whether their tool can be called now (nothing is known
    of it when no gateway runs here: the CLI's own search of the data folder)."""
    gateway = resources.gateway
    unavailable = None if gateway is None else partial(unavailable_reason, gateway.pool)
    penalty = resources.settings.search.unavailable_penalty
    outcome.results = list(rank_by_availability(outcome.results, unavailable, penalty))
    return outcome


def rank_by_availability(
    results: Sequence[RankedTool], unavailable: Unavailability | None, penalty: float
) -> list[SearchHit]:
    """Each result with whether its tool can be called now. An unavailable one loses `penalty` of its score (its
    explain says so) and the results are sorted again, stably: it goes below available ones less than `penalty`
    behind it, and stays in the results."""
    if unavailable is None:
        return [SearchHit(r.name, r.score, r.payload, r.explain) for r in results]
    hits = []
    for result in results:
        reason = unavailable(str(result.payload.get("server")), str(result.payload.get("name")))
        score, why = result.score, result.explain
        if reason is not None and penalty:
            score = round(score - penalty, 6)
            if why is not None:
                why = {**why, "unavailable_penalty": penalty}
        hits.append(SearchHit(result.name, score, result.payload, why, reason is None, reason))
    if penalty:
        hits.sort(key=lambda hit: -hit.score)
    return hits
