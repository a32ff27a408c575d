"""BM25's inverse document frequencies counted inside the caller's scope, for both index adapters.

Qdrant's IDF modifier counts every point of the shard or collection (deleted ones too, until the segment is
vacuumed): a restricted caller who repeats a search while tools it may not see are added or removed would see its
lexical scores move, and could learn, word by word, what the hidden catalog contains. Here each lexical query carries
its terms' IDF as query weights, counted over the tools the caller may use only (the permissions of the filter:
`allowed` and `denied`, not the servers or tags a caller picks, which hide nothing from it), with Qdrant's
formula: idf = ln(1 + (N - n + 0.5) / (n + 0.5)), N tools in scope, n of them holding the term."""

from __future__ import annotations

import math
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np

from indexer.index.base import SearchFilter

SCOPES_KEPT = 16  # restricted scopes whose counts are kept between catalog changes (~100 KB a 1,000 terms)


def idf(tools: int, holding: int) -> float:
    return math.log(1.0 + (tools - holding + 0.5) / (holding + 0.5))


class TermCounts:
    """The terms of each tool's lexical document, how many tools hold each term, and the IDF of a query's terms
    in a scope. Compact: 4 bytes a term a tool (a set of holders per term cost 16 MB at 10k tools)."""

    def __init__(self) -> None:
        self._terms: dict[str, array[int]] = {}  # qualified name -> its document's distinct term indices
        self._holding: dict[int, int] = {}  # term index -> how many tools hold it
        # permissions (allowed, denied) -> how many tools they admit and how many of those hold each term
        self._scopes: OrderedDict[tuple[frozenset[str] | None, frozenset[str]], _Scope] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, name: str, terms: Iterable[int]) -> None:
        with self._lock:
            self._drop(name)
            held = array("I", sorted(set(terms)))
            self._terms[name] = held
            for term in held:
                self._holding[term] = self._holding.get(term, 0) + 1
            self._scopes.clear()

    def remove(self, name: str) -> None:
        with self._lock:
            if self._drop(name):
                self._scopes.clear()

    def weights(self, terms: Sequence[int], where: SearchFilter) -> tuple[list[int], list[float]]:
        """The query terms that some tool in the caller's scope holds, and their IDF there."""
        tools, holding = self._counted(terms, where)
        kept = [(term, idf(tools, n)) for term, n in zip(terms, holding, strict=True) if n]
        return [term for term, _ in kept], [weight for _, weight in kept]

    def holders(self, terms: Sequence[int], where: SearchFilter) -> list[int]:
        """How many tools of the caller's scope hold each term (0: none)."""
        return self._counted(terms, where)[1]

    def _counted(self, terms: Sequence[int], where: SearchFilter) -> tuple[int, list[int]]:
        """The tools of the caller's scope and how many of them hold each term."""
        with self._lock:
            if where.permissions is None:
                return len(self._terms), [self._holding.get(term, 0) for term in terms]
            scope = self._scope(where.permissions)
            return scope.tools, scope.holding(terms)

    def _drop(self, name: str) -> bool:
        held = self._terms.pop(name, None)
        if held is None:
            return False
        for term in held:
            left = self._holding[term] - 1
            if left:
                self._holding[term] = left
            else:
                del self._holding[term]
        return True

    def _scope(self, permissions: tuple[frozenset[str] | None, frozenset[str]]) -> _Scope:
        scope = self._scopes.get(permissions)
        if scope is None:
            allowed, denied = permissions
            if allowed is not None:
                names = [n for n in allowed - denied if n in self._terms]
            else:
                names = [n for n in self._terms if n not in denied]
            scope = self._scopes[permissions] = _Scope(len(names), [self._terms[n] for n in names])
            while len(self._scopes) > SCOPES_KEPT:
                self._scopes.popitem(last=False)
        else:
            self._scopes.move_to_end(permissions)
        return scope


class _Scope:
    """How many tools of one scope hold each term (until the catalog changes)."""

    def __init__(self, tools: int, documents: list[array[int]]) -> None:
        self.tools = tools
        held = [np.frombuffer(d, dtype=np.uint32) for d in documents]
        self._terms, self._counts = np.unique(np.concatenate(held) if held else [], return_counts=True)

    def holding(self, terms: Sequence[int]) -> list[int]:
        if not len(self._terms):
            return [0] * len(terms)
        asked = np.asarray(terms, dtype=np.uint32)
        at = np.minimum(np.searchsorted(self._terms, asked), len(self._terms) - 1)
        return np.where(self._terms[at] == asked, self._counts[at], 0).tolist()
