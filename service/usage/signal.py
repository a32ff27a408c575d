"""The usage signal: how people asked for a tool before they used it successfully (issue 12, part 3).

Evidence is a successful execution that carries a `search_id`: that search's query text led to the tool. Per
permission scope (the sorted roles of the searching caller, logged with the search) and tool, the latest
`usage_max_queries` such queries are kept, embedded (through the service's embedder, each text once), with a
decayed weight each. On a search, each candidate with history in the caller's scope has `s`, the cosine of the
query to its nearest past query, and the candidates share one softmax with a "nobody" class of similarity
`usage_floor`:

    usage_weight * evidence(n) * exp((s - floor) / T) / (1 + sum over candidates with history of exp((s' - floor) / T)),
    evidence(n) = n / (n + usage_half_evidence),   T = usage_temperature,

so a query near nobody's past queries moves nothing, a query as near to two tools' pasts splits the signal, it is
zero without history, grows with the (decayed) evidence and never exceeds `usage_weight`. The retriever then cuts
each value so that no tool passes a candidate without history that led it (service.search.ranking.behind_newcomers):
a new tool that leads on its text stays ahead, by however little. Nearest past query rather than a centroid:
LLM-written and real requests for one tool come in several phrasings, and a centroid of them is near none (measured in
`toolscout bench learning --signal usage`). A scope never reads another scope's evidence, and inside a scope each
query keeps its caller: the searcher's own past is read as above, each other caller's latest QUERIES_PER_OTHER_CALLER
with at most `usage_evidence_per_caller` of evidence, in a softmax of their own whose energies are weighted by that
evidence (one caller adds at most usage_weight * evidence(0.1) = 0.14 and cannot dilute the searcher's own past).

A call and its search are two rows of two logs, which may reach the database in either order and late (another
replica's writer, a spill file replayed after an outage): a pair is read once both are counted by the statistics
(usage/stats.py sets `counted_at` whenever a row arrives), by whichever of the two was counted last. So every
replica, running or started later, learns the same calls, each once, in the time order of the calls."""

from __future__ import annotations

import asyncio
import logging
from bisect import insort
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import InstrumentedAttribute

from indexer.intents import split_intents, whole_from_parts, whole_from_parts_applies
from indexer.query_text import normalize_query, read_request, without_quoted
from service.db.models import Execution, Search, utcnow
from service.resources import Resources
from service.settings import LearningSettings
from service.usage.adapter import ScopeMaps
from service.usage.stats import as_utc

logger = logging.getLogger(__name__)

EMBED_CACHE_SIZE = 50_000  # query texts kept embedded (a few MB at 384 floats)
# Of each other caller, a tool's usage signal reads the latest queries only (with learning.usage_evidence_per_caller
# of evidence at most): a flood of one request by one caller is two near neighbours, not 32.
QUERIES_PER_OTHER_CALLER = 2
# A pair is read when its second row is counted (`counted_at`, stamped before the consumer's transaction commits, by
# whichever replica's clock): each reading goes back this far past its mark, and the ids read meanwhile are skipped.
OVERLAP_SECONDS = 30.0


def scope_key(roles: Iterable[str]) -> str:
    """The permission scope a search is learned in and read from: its caller's sorted roles."""
    return ",".join(sorted(roles))


def evidence(n: float, half: float) -> float:
    """n / (n + half): zero without history, one half at `half` decayed uses, below one always."""
    return n / (n + half) if n > 0 else 0.0


@dataclass
class ToolUsage:
    """One tool's recent successful queries in one scope (each with its caller), and their embeddings."""

    queries: list[tuple[str, datetime, str]]  # (query, time, caller), oldest first
    vectors: np.ndarray | None = None  # one unit row per kept query
    weights: np.ndarray | None = None  # the decayed weight of each kept query
    weight: float = 0.0  # decayed number of kept queries
    callers: np.ndarray | None = None  # the caller of each kept query
    shared: np.ndarray | None = None  # the rows other callers read: each caller's latest QUERIES_PER_OTHER_CALLER
    capped: dict[str, float] = field(default_factory=dict)  # per caller, the evidence other callers read of it

    def keep(self, query: str, at: datetime, caller: str, bound: int) -> None:
        """Keep a query in time order (one read late lands among its peers); past the bound, the oldest one of a
        caller holding the most goes (one caller's flood of a tool pushes out its own past, not its colleagues')."""
        insort(self.queries, (query, at, caller), key=lambda kept: kept[1])
        if len(self.queries) > bound:
            held = Counter(c for _, _, c in self.queries)
            most = max(held.values())
            del self.queries[next(i for i, (_, _, c) in enumerate(self.queries) if held[c] == most)]

    def weigh(self, weights: np.ndarray, s: LearningSettings) -> None:
        """Set the decayed weights and what other callers read of each caller."""
        callers = [c for _, _, c in self.queries]
        self.weights, self.weight, self.callers = weights, float(weights.sum()), np.array(callers, dtype=object)
        latest: dict[str, list[int]] = {}
        for i in range(len(callers) - 1, -1, -1):
            rows = latest.setdefault(callers[i], [])
            if len(rows) < QUERIES_PER_OTHER_CALLER:
                rows.append(i)
        self.shared = np.zeros(len(callers), dtype=bool)
        self.shared[[i for rows in latest.values() for i in rows]] = True
        self.capped = {c: min(float(weights[rows].sum()), s.usage_evidence_per_caller) for c, rows in latest.items()}


@dataclass
class UsageVectors:
    """Per scope and tool the bounded, decayed evidence and its vectors; read on every search."""

    tools: dict[tuple[str, str], ToolUsage] = field(default_factory=dict)
    by_scope: dict[str, dict[str, ToolUsage]] = field(default_factory=dict)
    cache: dict[str, np.ndarray] = field(default_factory=dict)  # query text -> unit embedding
    marks: dict[str, datetime] = field(default_factory=dict)  # per log completing pairs, the latest counted_at read
    # Per log completing pairs, the executions read within its overlap (id -> counted_at).
    seen: dict[str, dict[str, datetime]] = field(default_factory=dict)
    added: dict[str, int] = field(default_factory=dict)  # per scope, the evidence read so far (the maps retrain on it)
    maps: dict[str, ScopeMaps] = field(default_factory=dict)  # per scope, its query maps (usage/adapter_training.py)
    maps_checked: dict[str, int] = field(default_factory=dict)  # per scope, the evidence count its maps were due at
    training: asyncio.Future[None] | None = None  # the maps' training under way

    def add(self, scope: str, tool: str, caller: str, query: str, at: datetime, bound: int) -> None:
        self.added[scope] = self.added.get(scope, 0) + 1
        usage = self.tools.get((scope, tool))
        if usage is None:
            usage = self.tools[(scope, tool)] = ToolUsage([])
            self.by_scope.setdefault(scope, {})[tool] = usage
        usage.keep(query, at, caller, bound)

    def signal(
        self, scope: str, caller: str | None, vector: Sequence[float], names: Iterable[str], s: LearningSettings
    ) -> dict[str, float]:
        """The usage value of each name with history in this scope for this caller (names without history are
        left out): the signal of the caller's own past queries, plus that of the other callers' (each one's latest
        few, its evidence capped), each with its own softmax, so nobody else's past dilutes the caller's own."""
        scoped = self.by_scope.get(scope)
        if not scoped or s.usage_weight == 0.0:
            return {}
        query = _unit(np.asarray(vector, dtype=np.float32))
        known = [(n, u) for n in names if (u := scoped.get(n)) is not None and u.vectors is not None]
        if not known:
            return {}
        own: dict[str, tuple[float, float]] = {}  # name -> (nearest, evidence)
        others: dict[str, tuple[float, float]] = {}
        for name, usage in known:
            assert usage.weights is not None and usage.shared is not None
            sims = usage.vectors @ query  # type: ignore[operator]
            mine = usage.callers == caller
            if mine.any():
                own[name] = (float(sims[mine].max()), evidence(float(usage.weights[mine].sum()), s.usage_half_evidence))
            theirs = usage.shared & ~mine
            if theirs.any():
                n = sum(v for c, v in usage.capped.items() if c != caller)
                others[name] = (float(sims[theirs].max()), evidence(n, s.usage_half_evidence))
        out: dict[str, float] = {}
        for part, weighted in ((own, False), (others, True)):
            if not part:
                continue
            nearest = np.array([near for near, _ in part.values()])
            strength = np.array([ev for _, ev in part.values()])
            energy = np.exp((nearest - s.usage_floor) / s.usage_temperature)
            # Other callers' tools weigh in their softmax by their evidence too: one caller's little evidence takes
            # little of the share of a tool many colleagues used (it could otherwise halve it).
            energy = energy * strength if weighted else energy
            share = energy / (1.0 + energy.sum())  # the 1 is "nobody's history": a query near none moves nothing
            for name, value in zip(part, strength * share, strict=True):
                out[name] = out.get(name, 0.0) + s.usage_weight * float(value)
        return {name: round(min(value, s.usage_weight), 6) for name, value in out.items() if value > 1e-4}


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


async def _embedded(resources: Resources, state: UsageVectors, texts: set[str]) -> None:
    missing = sorted(t for t in texts if t not in state.cache)
    if not missing:
        return
    if len(state.cache) + len(missing) > EMBED_CACHE_SIZE:
        state.cache.clear()  # rare: re-embedding the kept queries is cheaper than tracking recency
        missing = sorted(texts)
    search = resources.settings.search

    def parts_of(text: str) -> list[str]:
        parts = split_intents(text) if search.split_multi_intent else []
        return parts if whole_from_parts_applies(parts, search.whole_from_parts) else []

    for start in range(0, len(missing), 256):
        chunk = missing[start : start + 256]
        # A past request is embedded as a search embeds it: read as the search reads it, without its quoted values,
        # a split one as its parts' weighted mean.
        read = {text: read_request(normalize_query(text)) for text in chunk}
        parts = {text: parts_of(read[text]) for text in chunk}
        wanted = list(dict.fromkeys(t for text in chunk for t in parts[text] or [read[text]]))
        vectors = dict(zip(wanted, await resources.embed([without_quoted(t) for t in wanted]), strict=True))
        for text in chunk:
            pieces = parts[text]
            vector = whole_from_parts(pieces, [vectors[p] for p in pieces]) if pieces else vectors[read[text]]
            state.cache[text] = _unit(np.asarray(vector, dtype=np.float32))


CountedAt = InstrumentedAttribute[datetime | None]


def _completing(pair_by: str) -> tuple[CountedAt, CountedAt]:
    """Of a pair (a successful call and the search it came from), the row whose counting completes it, and the other."""
    return (
        (Execution.counted_at, Search.counted_at)
        if pair_by == "executions"
        else (Search.counted_at, Execution.counted_at)
    )


async def _read_completed(resources: Resources, state: UsageVectors, pair_by: str, batch: int) -> set[tuple[str, str]]:
    """Fold the pairs completed (both rows counted) by the counting of `pair_by`'s rows since this log's mark, less
    the overlap; the keys touched. A call counted with or after its search completes its pair; a search counted
    after its call (written late, as a replica cut off from the database writes it) completes it: each pair is in one
    of the two readings, read when its second row is counted, whatever the rows' own times."""
    settings = resources.settings.learning
    completed_at, other_at = _completing(pair_by)
    mark = state.marks.get(pair_by)
    since = mark - timedelta(seconds=OVERLAP_SECONDS) if mark is not None else None
    seen = state.seen.setdefault(pair_by, {})
    touched: set[tuple[str, str]] = set()
    page: tuple[datetime, str] | None = None
    while True:
        statement = (
            select(
                Execution.id,
                completed_at,
                Execution.finished_at,
                Execution.tool,
                Search.query,
                Search.scope,
                Search.caller,
            )
            # The searcher's own calls only: a caller naming another's search id (its own roles, its own
            # permissions) must not teach that search's scope.
            .join(Search, and_(Search.id == Execution.search_id, Search.caller == Execution.caller))
            .where(Execution.status == "ok", Search.scope.is_not(None), completed_at.is_not(None))
            .where(other_at <= completed_at if pair_by == "executions" else other_at < completed_at)
            .order_by(completed_at, Execution.id)
            .limit(batch)
        )
        if page is not None:
            statement = statement.where(
                or_(completed_at > page[0], and_(completed_at == page[0], Execution.id > page[1]))
            )
        elif since is not None:
            statement = statement.where(completed_at > since)
        async with resources.session() as session:
            rows = (await session.execute(statement)).all()
        for execution_id, counted_at, finished_at, tool, query, scope, caller in rows:
            page = (counted_at, execution_id)
            counted_at = as_utc(counted_at)
            if mark is None or counted_at > mark:
                mark = counted_at
            if execution_id in seen:
                continue
            seen[execution_id] = counted_at
            state.add(scope, tool, caller, query, as_utc(finished_at), settings.usage_max_queries)
            touched.add((scope, tool))
        if mark is not None:
            state.marks[pair_by] = mark
            # An id counted before the overlap is never read again (pages and readings go forward): forget it.
            oldest = mark - timedelta(seconds=OVERLAP_SECONDS)
            seen = state.seen[pair_by] = {i: at for i, at in seen.items() if at >= oldest}
        if len(rows) < batch:
            return touched


async def _read_evidence(resources: Resources, state: UsageVectors, batch: int) -> set[tuple[str, str]]:
    """Fold the pairs completed since the last reading into the bounded sets; the keys touched."""
    touched: set[tuple[str, str]] = set()
    for pair_by in ("executions", "searches"):
        touched |= await _read_completed(resources, state, pair_by, batch)
    return touched


async def refresh_usage(resources: Resources, state: UsageVectors) -> int:
    """Read new evidence, then refresh every tool's vectors and decayed weight (the decay moves every weight)."""
    settings = resources.settings.learning
    touched = await _read_evidence(resources, state, settings.refresh_batch)
    if not state.tools:
        return 0
    await _embedded(resources, state, {q for usage in state.tools.values() for q, _, _ in usage.queries})
    now = utcnow()
    for key, usage in state.tools.items():
        ages = np.array([(now - at).total_seconds() / 86400.0 for _, at, _ in usage.queries], dtype=np.float32)
        if key in touched or usage.vectors is None:  # the kept queries changed only where evidence came in
            usage.vectors = np.stack([state.cache[q] for q, _, _ in usage.queries])
        usage.weigh(np.power(0.5, np.maximum(ages, 0.0) / settings.half_life_days), settings)
    if touched:
        logger.debug("usage signal: %d tool scopes gained evidence", len(touched))
    return len(touched)
