"""Whether a search result's tool can be called now, from what the execution gateway knows of its server.

A tool is available when its server has a connection in the gateway's pool that is ready, or on its way to ready
(installing, starting, connecting: a call waits for it). It is not when its server has no connection (a
catalog-only registration: state `catalog`, as GET /servers shows it), or its connection is in `backoff` after a
failure or `stopped`. A dict lookup per result, no I/O; the state told is the one GET /servers already shows the
caller of a server whose tools it may use (search results hold only those). Unavailable tools are never hidden
(an admin may be about to fix the server): `search.unavailable_penalty` only moves them below available tools of
a near score within the k results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.resources import Resources
from service.search.retrieval import RankedTool, SearchOutcome

# States of a connection that a call goes through in, or waits in for the connection already on its way.
CALLABLE_STATES = frozenset({"ready", "installing", "starting", "connecting"})
NO_CONNECTION = "catalog"  # the state GET /servers shows for a server without a connection


@dataclass
class SearchHit(RankedTool):
    """A ranked tool and whether it can be called now (None: no gateway runs in this process, so unknown)."""

    available: bool | None = None
    server_state: str | None = None  # of an unavailable tool's server: catalog, backoff or stopped


def server_states(resources: Resources) -> dict[str, str] | None:
    """Each connected server's state (GET /servers' `state`), or None when no gateway runs here (the CLI's own
    search): then nothing is known of availability and no result says anything of it."""
    gateway = resources.gateway
    if gateway is None:
        return None
    return {connection.id: connection.health.state for connection in gateway.pool.connections()}


def mark_availability(resources: Resources, outcome: SearchOutcome) -> SearchOutcome:
    """The outcome with its results as SearchHits that say whether their tool can be called now."""
    states = server_states(resources)
    outcome.results = list(rank_by_availability(outcome.results, states, resources.settings.search.unavailable_penalty))
    return outcome


def rank_by_availability(
    results: Sequence[RankedTool], states: Mapping[str, str] | None, penalty: float
) -> list[SearchHit]:
    """Each result with whether its tool can be called now, given its server's state (states: by server id; a
    server without one has no connection). An unavailable one loses `penalty` of its score (its explain says so)
    and the results are sorted again, stably: it goes below the available ones less than `penalty` behind it."""
    if states is None:
        return [SearchHit(r.name, r.score, r.payload, r.explain) for r in results]
    hits = []
    for result in results:
        state = states.get(str(result.payload.get("server")), NO_CONNECTION)
        available = state in CALLABLE_STATES
        score, why = result.score, result.explain
        if not available and penalty:
            score = round(score - penalty, 6)
            if why is not None:
                why = {**why, "unavailable_penalty": penalty}
        hits.append(SearchHit(result.name, score, result.payload, why, available, None if available else state))
    if penalty:
        hits.sort(key=lambda hit: -hit.score)
    return hits
