"""BM25's inverse document frequencies counted inside the caller's scope, for the embedded index.

Qdrant's IDF modifier counts every point of the shard (deleted ones too, until the segment is vacuumed): a
restricted caller who repeats a search while tools it may not see are added or removed would see its lexical
scores move, and could learn, word by word, what the hidden catalog contains. Here each lexical query carries
its terms' IDF as query weights, counted over the tools the caller may use only (the permissions of the filter:
`allowed` and `denied`, not the servers or tags a caller picks, which hide nothing from it), with Qdrant's
formula: idf = ln(1 + (N - n + 0.5) / (n + 0.5)), N tools in scope, n of them holding the term."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from indexer.index.base import SearchFilter

SCOPES_KEPT = 64  # scopes whose counts are cached between catalog changes
TERMS_KEPT = 20_000  # terms counted per cached scope before its counts are dropped and counted again


def idf(tools: int, holding: int) -> float:
    return math.log(1.0 + (tools - holding + 0.5) / (holding + 0.5))


class TermCounts:
    """Which tools hold each term of the lexical documents, and the IDF of a query's terms in a scope."""

    def __init__(self) -> None:
        self._holders: dict[int, set[str]] = {}  # term index -> qualified names whose document holds it
        self._terms: dict[str, tuple[int, ...]] = {}  # qualified name -> its document's term indices
        self._scopes: OrderedDict[tuple[frozenset[str] | None, frozenset[str]], _ScopeCounts] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, name: str, terms: Iterable[int]) -> None:
        with self._lock:
            self._drop(name)
            held = tuple(terms)
            self._terms[name] = held
            for term in held:
                self._holders.setdefault(term, set()).add(name)
            self._scopes.clear()

    def remove(self, name: str) -> None:
        with self._lock:
            if self._drop(name):
                self._scopes.clear()

    def weights(self, terms: Sequence[int], where: SearchFilter) -> tuple[list[int], list[float]]:
        """The query terms that some tool in the caller's scope holds, and their IDF there."""
        with self._lock:
            counts = self._scope(where)
            kept: list[int] = []
            weights: list[float] = []
            for term in terms:
                holding = counts.holding(term, self._holders.get(term))
                if holding:
                    kept.append(term)
                    weights.append(idf(counts.tools, holding))
            return kept, weights

    def _drop(self, name: str) -> bool:
        held = self._terms.pop(name, None)
        if held is None:
            return False
        for term in held:
            names = self._holders.get(term)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._holders[term]
        return True

    def _scope(self, where: SearchFilter) -> _ScopeCounts:
        key = (where.allowed, where.denied)
        counts = self._scopes.get(key)
        if counts is None:
            counts = _ScopeCounts(where.allowed, where.denied, self._terms)
            self._scopes[key] = counts
            while len(self._scopes) > SCOPES_KEPT:
                self._scopes.popitem(last=False)
        else:
            self._scopes.move_to_end(key)
        return counts


class _ScopeCounts:
    """The tools of one scope and how many of them hold each term asked for so far (until the catalog changes)."""

    def __init__(self, allowed: frozenset[str] | None, denied: frozenset[str], terms: dict[str, tuple[int, ...]]):
        self.allowed, self.denied = allowed, denied
        self.whole = allowed is None and not denied
        if allowed is not None:
            self.tools = sum(1 for name in allowed - denied if name in terms)
        else:
            self.tools = len(terms) - sum(1 for name in denied if name in terms)
        self._holding: dict[int, int] = {}

    def holding(self, term: int, holders: set[str] | None) -> int:
        if not holders:
            return 0
        if self.whole:
            return len(holders)
        count = self._holding.get(term)
        if count is None:
            inside = holders & self.allowed if self.allowed is not None else holders
            count = len(inside) - len(inside & self.denied) if self.denied else len(inside)
            if len(self._holding) >= TERMS_KEPT:
                self._holding.clear()
            self._holding[term] = count
        return count
