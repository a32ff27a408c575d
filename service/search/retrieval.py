"""Query -> candidates -> ranked tools: the async orchestration of the search pipeline of DESIGN.md."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.close_index import CloseNameIndex
from indexer.closest import close_names
from indexer.documents import normalize_name_key
from indexer.index.base import DENSE_FIELDS, Hit, SearchFilter, SignalQuery, pooled_search_many
from indexer.intents import split_intents, whole_from_parts, whole_from_parts_applies
from indexer.names import READ_VERBS, asks, name_verb, opposed_verbs, query_stems, spelling_tier, wanted_verbs
from indexer.query_text import normalize_query, read_request, without_quoted
from service.catalog.server_vectors import ServerVectors
from service.db.models import Tool, active
from service.observability import Stage, stage
from service.search.index_steps import IndexSteps, Texts, Widths, widths_for
from service.search.ranking import (
    LEAD_VERB_HEAD,
    SIGNALS,
    Candidate,
    add_signal,
    apply_boosts,
    apply_lead_verb,
    apply_name_verbs,
    behind_newcomers,
    from_fused,
    fuse,
    max_merge,
    rank,
)
from service.search.spelling import spelled_right
from service.usage.adapter import adapter_changes

if TYPE_CHECKING:
    from service.resources import Resources

# (caller id, permission scope, names) -> the learned boosts of each name (usage.learning.boosts_for).
Boosts = Callable[[str, str | None, list[str]], dict[str, dict[str, float]]]


@dataclass
class RankedTool:
    """One search result."""

    name: str
    score: float
    payload: dict[str, Any]
    explain: dict[str, Any] | None = None


@dataclass
class SearchOutcome:
    """The ranked tools of one search and how long it took."""

    results: list[RankedTool]
    latency_ms: float
    parts: list[str] = field(default_factory=list)


CLOSEST_POOL = 500  # a scope this small is compared whole with a misspelt name (indexer/closest.py)


@dataclass
class _NameEntry:
    server: str
    tags: tuple[str, ...]


class NameDirectory:
    """In-memory map from normalised tool names (qualified and original) to qualified names."""

    def __init__(self) -> None:
        self._by_key: dict[str, set[str]] = defaultdict(set)
        self._entries: dict[str, _NameEntry] = {}
        self._original: dict[str, str] = {}
        self._close = CloseNameIndex()
        self.verbs: dict[str, str] = {}  # qualified name -> the stemmed verb its name leads with
        self._version = 0  # changes with every entry
        self._labels: dict[frozenset[str] | None, tuple[int, frozenset[str], frozenset[str]]] = {}

    def labels(self, names: frozenset[str] | None) -> tuple[frozenset[str], frozenset[str]]:
        """The servers and the tags of these tools, or of every tool (a caller's allowed set: the policy hands out one
        object until the catalog or the permissions change, so each is gathered once per change of either: 8 ms for
        10k tools, ~0.1 s for 100k, as the index's own scope of the set costs)."""
        kept = self._labels.get(names)
        if kept is None or kept[0] != self._version:
            entries = [e for e in (self._entries.values() if names is None else map(self._entries.get, names)) if e]
            servers = frozenset(map(attrgetter("server"), entries))
            tags = frozenset(chain.from_iterable(map(attrgetter("tags"), entries)))
            if len(self._labels) >= 16:
                self._labels.clear()
            kept = self._labels[names] = (self._version, servers, tags)
        return kept[1], kept[2]

    def add(self, qualified: str, name: str, server: str, tags: Iterable[str]) -> None:
        self.remove(qualified)
        self._version += 1
        self._entries[qualified] = _NameEntry(server, tuple(tags))
        self._original[qualified] = name
        self.verbs[qualified] = name_verb(name, server)
        for key in {normalize_name_key(qualified), normalize_name_key(name)} - {""}:  # "___", "🔥": no spelling
            self._by_key[key].add(qualified)
        self._close.add(qualified, name)

    def remove(self, qualified: str) -> None:
        name = self._original.pop(qualified, None)
        if name is None:
            return
        self._version += 1
        self._entries.pop(qualified, None)
        self.verbs.pop(qualified, None)
        self._close.discard(qualified)
        for key in {normalize_name_key(qualified), normalize_name_key(name)} - {""}:  # "___", "🔥": no spelling
            self._by_key[key].discard(qualified)
            if not self._by_key[key]:
                del self._by_key[key]

    def exact(self, query: str, where: SearchFilter) -> list[str]:
        """Tools whose name equals the query (ignoring case, `_`, `-`, `.` and spaces) inside the filter."""
        found = self._by_key.get(normalize_name_key(query), set())
        return sorted(q for q in found if self._passes(q, where))

    def exact_tiers(self, query: str, where: SearchFilter, spelled: str | None = None) -> dict[str, int]:
        """The exact matches with their spelling tier: the one spelled as the query before `math.gcd`/`math_gcd`."""
        return {q: spelling_tier(query, (q, self._original[q]), spelled) for q in self.exact(query, where)}

    def _passes(self, qualified: str, where: SearchFilter) -> bool:
        entry = self._entries[qualified]
        if where.servers and entry.server not in where.servers:
            return False
        if where.tags and not set(where.tags) & set(entry.tags):
            return False
        if where.allowed is not None and qualified not in where.allowed:
            return False
        return qualified not in where.denied

    def closest(self, name: str, n: int = 5, allowed: frozenset[str] | None = None) -> list[str]:
        """The registered names close to an unknown one (indexer/closest.py says which are), of `allowed` when
        given: a scope of at most CLOSEST_POOL names is compared whole, found without walking every name; a broader
        one, only the few the close-name index offers (indexer/close_index.py)."""
        if allowed is not None and len(allowed) <= CLOSEST_POOL:
            return close_names(name, {q: self._original[q] for q in allowed if q in self._entries}, n)
        return self._close.closest(name, self._by_key, allowed, n)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def listed_name(self, qualified: str) -> str | None:
        """The name the tool's upstream listed."""
        return self._original.get(qualified)

    def server(self, qualified: str) -> str | None:
        entry = self._entries.get(qualified)
        return entry.server if entry else None

    def __len__(self) -> int:
        return len(self._entries)


class Retriever:
    """Hybrid search over the index: exact names, per-field candidates, fusion, multi-intent merge, priors."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.directory = NameDirectory()
        self.servers = ServerVectors()
        self.index_steps = IndexSteps(resources, self._pooled_many)

    async def load_names(self, session: AsyncSession) -> None:
        """Fill the name directory from the catalog of record."""
        rows = await session.execute(select(Tool.qualified_name, Tool.name, Tool.server_id, Tool.tags).where(active()))
        for qualified, name, server, tags in rows:
            self.directory.add(qualified, name, server, tags or ())

    def weights(self) -> dict[str, float]:
        s = self.resources.settings.search
        return {
            "name": s.weight_name,
            "description": s.weight_description,
            "params": s.weight_params,
            "lexical": s.weight_lexical,
        }

    async def search(
        self,
        query: str,
        k: int,
        where: SearchFilter,
        *,
        caller_id: str | None = None,
        boosts: Boosts | None = None,
        explain: bool = False,
        scope: str | None = None,
    ) -> SearchOutcome:
        """Top k tools for a request, inside the filter (its text read as `normalize_query` writes it)."""
        started, spelled, query = time.perf_counter(), query, normalize_query(query)
        settings = self.resources.settings.search
        if where.matches_nothing:
            return SearchOutcome([], 0.0)
        read = await spelled_right(self.resources, read_request(query), where)  # all signals but the exact name
        texts = [read]
        parts = split_intents(read) if settings.split_multi_intent else []
        texts.extend(parts)
        from_parts = whole_from_parts_applies(parts, settings.whole_from_parts)
        sparse = [self.resources.encoder.encode_query(text) for text in texts]
        index = self.resources.index
        assert index is not None
        widths = widths_for(settings, k)

        def with_whole(embedded: list[list[float]]) -> list[list[float]]:
            return [whole_from_parts(parts, embedded), *embedded] if from_parts else embedded

        def index_step(embedded: list[list[float]]) -> tuple[list[list[float]], bool, list[list[Hit]], float]:
            """The search's vectors and the index's hits for them, and when this began (perf_counter)."""
            began = time.perf_counter()
            vectors = with_whole(embedded)
            return vectors, *self._index_hits_now(index, list(zip(vectors, sparse, strict=True)), where, widths), began

        # A search alone runs its index step on the embedder's thread right after its pass (Resources.embed_then). The
        # dense fields read it without quoted values, what to pass, not which tool (Seal-Tools R@5 .955 -> .957).
        embedded_texts = [without_quoted(text) for text in (parts if from_parts else texts)]
        embedding = self.resources.embed_then(embedded_texts, index_step, caller_id)
        with stage(self.resources, "embed") as embed_stage:
            embedded, done = await embedding
            if done is not None:
                embed_stage.ended = done[3]
        if done is None:
            vectors = with_whole(embedded)
            with stage(self.resources, "index"):
                fused, hit_lists = await self._index_hits(index, list(zip(vectors, sparse, strict=True)), where, widths)
        else:
            vectors, fused, hit_lists, began = done
            Stage(self.resources, "index", started=began, started_wall=embed_stage.ended_wall).end()
        ranking = Stage(self.resources, "rank")
        exact = self.directory.exact_tiers(query, where, spelled)
        # Fusion keeps k more than the exact names (ranked in whether found or not): k found ones stay behind them.
        per_text = self._candidates(fused, hit_lists, vectors, k + len(exact), scope)
        verbs = self.directory.verbs
        for text, text_candidates in zip(texts, per_text, strict=True):  # each part leads with its own verb
            apply_lead_verb(text_candidates, verbs, wanted_verbs(text), settings.weight_lead_verb)
            apply_lead_verb(text_candidates, verbs, opposed_verbs(text), settings.weight_opposed_verb, "opposed_verb")
            if asks(text):
                apply_lead_verb(text_candidates, verbs, READ_VERBS, settings.weight_question_read, "question_read")
        candidates = (
            max_merge(per_text[0], list(zip(parts, per_text[1:], strict=True)), settings.part_penalty)
            if parts
            else per_text[0]
        )
        apply_name_verbs(candidates, self.directory.verbs, query_stems(read), settings.weight_name_verb)
        usage, learning = self.resources.usage, self.resources.settings.learning
        if usage is not None and scope is not None and learning.enabled:
            maps = usage.maps.get(scope) if learning.query_adapter_enabled and not fused else None
            if maps is not None:
                changes = adapter_changes(
                    maps, caller_id, candidates, texts, vectors, hit_lists, self.weights(), learning.adapter_weight
                )
                add_signal(candidates, "adapter", behind_newcomers(candidates, changes, usage.by_scope[scope]))
            values = usage.signal(scope, caller_id, vectors[0], list(candidates), learning)
            add_signal(candidates, "usage", behind_newcomers(candidates, values, usage.by_scope.get(scope, {})))
        if boosts is not None and caller_id is not None and candidates:
            apply_boosts(candidates, boosts(caller_id, scope, list(candidates)))
        ranked = rank(candidates, exact, len(candidates) + len(exact))
        ranking.end()
        results = await self._with_payloads(index, ranked, k, explain)
        return SearchOutcome(results, (time.perf_counter() - started) * 1000, parts)

    async def _with_payloads(self, index: Any, ranked: list[Candidate], k: int, explain: bool) -> list[RankedTool]:
        """The first k ranked tools that the index holds, with their payloads. Payloads only for the winners:
        converting a hundred payloads per signal costs more than the search. A tool it does not hold (an exact name
        the directory has and the index no longer, a point deleted meanwhile) leaves its place to the next one."""
        results: list[RankedTool] = []
        cached = getattr(index, "cached_payloads", None)
        start = 0
        while len(results) < k and start < len(ranked):
            batch, start = ranked[start : start + k - len(results)], start + k - len(results)
            # An index that keeps recent payloads in memory (the embedded engine) spares the thread hop.
            payloads = cached(c.name for c in batch) if cached is not None else {}
            if missing := [c.name for c in batch if c.name not in payloads]:
                payloads.update(await self.resources.run_index(index.payloads, missing))
            results.extend(
                RankedTool(c.name, round(c.score, 6), payloads[c.name], self._explain(c) if explain else None)
                for c in batch
                if c.name in payloads
            )
        return results

    async def _index_hits(
        self, index: Any, texts: Texts, where: SearchFilter, widths: Widths
    ) -> tuple[bool, list[list[Hit]]]:
        """`_index_hits_now` on an index thread, together with the other searches that wake now (IndexSteps)."""
        if self._fused_search(index) is not None:
            return await self.resources.run_index(self._index_hits_now, index, texts, where, widths)  # type: ignore[no-any-return]
        return False, await self.index_steps.hits(index, texts, where, widths)

    def _fused_search(self, index: Any) -> Any:
        """The index's own fusion (a Qdrant server, with `index.server_fusion`), else None."""
        return getattr(index, "fused_search", None) if self.resources.settings.index.server_fusion else None

    def _index_hits_now(
        self, index: Any, texts: Texts, where: SearchFilter, widths: Widths
    ) -> tuple[bool, list[list[Hit]]]:
        """The index's hits (blocking: on a thread): one list per text fused by the index when it can (a Qdrant
        server with `index.server_fusion`; True), else one list per text and signal (False), in SIGNALS order."""
        fused_search = self._fused_search(index)
        if fused_search is not None:
            width = widths.candidates
            groups = [
                [SignalQuery(f, width, dense=vector) for f in DENSE_FIELDS]  # type: ignore[arg-type]
                + [SignalQuery("lexical", width, sparse=lexical)]
                for vector, lexical in texts
            ]
            return True, fused_search(groups, self.weights(), width, where)
        return False, self._pooled_many(index, [(texts, where, widths)])[0]

    def _pooled_many(self, index: Any, requests: list[tuple[Texts, SearchFilter, Widths]]) -> list[list[list[Hit]]]:
        """`pooled_search_many` with the search settings, once per widths asked (searches of k up to
        `search.candidates` all share one) (blocking: on a thread)."""
        centre = self.resources.settings.search.centre_fields
        found: dict[int, list[list[Hit]]] = {}
        for widths in dict.fromkeys(w for _, _, w in requests):
            group = [i for i, (_, _, w) in enumerate(requests) if w == widths]
            hits = pooled_search_many(
                index,
                [requests[i][:2] for i in group],
                widths.pool,
                widths.candidates,
                centre,
                widths.part_pool,
                widths.part_candidates,
                widths.part_candidates,  # the whole text's lexical hits: as many as at a small k
            )
            found.update(zip(group, hits, strict=True))
        return [found[i] for i in range(len(requests))]

    def bonus_bound(self, scope: str | None) -> float:
        """The most that the signals added after fusion can lift a tool from below a text's LEAD_VERB_HEAD best
        (name verb, usage, learned boosts). The lead verb and the question's read verbs go to those best only, which
        fusion always keeps (`_candidates`): lifting them can only push the others further from the top (a negative
        weight lowers them, which brings the others that much closer)."""
        search, learning = self.resources.settings.search, self.resources.settings.learning
        head_only = (search.weight_lead_verb, search.weight_question_read, search.weight_opposed_verb)
        bound = max(0.0, search.weight_name_verb) + sum(max(0.0, -w) for w in head_only)
        if learning.enabled:
            bound += learning.max_popularity_boost + learning.max_caller_boost
            usage = self.resources.usage
            if usage is not None and scope is not None and usage.by_scope.get(scope):
                bound += max(0.0, learning.usage_weight)
            if usage is not None and scope is not None and learning.query_adapter_enabled and usage.maps.get(scope):
                bound += 2.0 * max(0.0, learning.adapter_weight)  # a rise of one, a fall of those above it
        return bound

    def _candidates(
        self, fused: bool, hit_lists: list[list[Hit]], vectors: list[list[float]], k: int, scope: str | None
    ) -> list[dict[str, Candidate]]:
        """Fused candidates per text: the index's own fusion z-normalised, else the signals fused here (with the
        server signal), without the tools that cannot reach the top k."""
        if fused:
            return [from_fused({h.qualified_name: h.score for h in hits}) for hits in hit_lists]
        weights = {**self.weights(), "server": self.resources.settings.search.weight_server}
        keep = (max(k, LEAD_VERB_HEAD), self.bonus_bound(scope) + 1e-9)
        width = len(SIGNALS)
        per_text: list[dict[str, Candidate]] = []
        for t, vector in enumerate(vectors):
            signal_scores = {
                signal: {h.qualified_name: h.score for h in hit_lists[t * width + s]}
                for s, signal in enumerate(SIGNALS)
            }
            covering = self._server_signal(signal_scores, vector)
            per_text.append(fuse(signal_scores, weights, keep, covering, self.resources.settings.search.candidates))
        return per_text

    def _server_signal(
        self, signal_scores: dict[str, dict[str, float]], vector: list[float]
    ) -> dict[str, dict[str, float]]:
        """The similarity of each candidate's server to the request, for the candidates of described servers."""
        if not self.resources.settings.search.weight_server or len(self.servers) < 2:
            return {}  # fewer than two described servers: nothing to tell candidates apart by
        owners = {name: self.directory.server(name) or "" for scores in signal_scores.values() for name in scores}
        similarity = self.servers.similarities(vector, set(owners.values()))
        return {"server": {name: similarity[s] for name, s in owners.items() if s in similarity}}

    @staticmethod
    def _explain(candidate: Candidate) -> dict[str, Any]:
        return {
            "exact_name": candidate.exact,
            "signals": {k: round(v, 4) for k, v in candidate.signals.items()},
            "similarity": {k: round(v, 4) for k, v in candidate.raw.items()},
            "boosts": {k: round(v, 4) for k, v in candidate.boosts.items()},
            "matched_part": candidate.matched_part,
        }
