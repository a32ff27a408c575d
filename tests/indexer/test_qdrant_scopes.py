"""The Qdrant adapter's statistics of a caller's scope (indexer/index/qdrant_scopes.py): BM25's IDF and the
centring means counted over the tools its permissions admit, this adapter's writes counted at once, other
replicas' within the TTL, read again in the background while every search keeps the stale counts."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from indexer.index import qdrant_scopes
from indexer.index.base import LEXICAL_FIELD, IndexBackendError, SearchFilter, SignalQuery
from indexer.index.qdrant import QdrantIndex
from indexer.index.qdrant_scopes import TTL_SECONDS, ScopeStatistics
from indexer.index.term_counts import idf
from indexer.lexical import SparseVector
from tests.indexer.test_index_contract import DIM, E0, point

A, B, C = 101, 202, 303
SCOPE = SearchFilter(allowed=frozenset({"s__one", "s__two"}))
SEEN = [
    point("s__one", angles=(0, 30, 60), lexical={A: 1.0, B: 0.5}),
    point("s__two", angles=(40, 10, 20), lexical={A: 0.5}),
]
HIDDEN = [point(f"h__{i}", server="h", angles=(i, 5 * i, 80), lexical={A: 1.0, C: 1.0}) for i in range(8)]
WEIGHTS = {"name": 0.1, "description": 0.45, "params": 0.1, "lexical": 0.35}


@pytest.fixture
def index() -> Iterator[QdrantIndex]:
    opened = QdrantIndex(":memory:", "scopes", DIM)
    opened.ensure_collection()
    opened.upsert(SEEN)
    yield opened
    opened.close()


def replica_of(index: QdrantIndex) -> QdrantIndex:
    """Another adapter on the same collection (as another replica's on a shared server)."""
    replica = QdrantIndex(":memory:", index.collection, DIM)
    replica._client.close()
    replica._client = index._client
    return replica


def lexical(*terms: int) -> SignalQuery:
    return SignalQuery("lexical", 10, sparse=SparseVector(sorted(terms), [1.0] * len(terms)))


def scores(index: QdrantIndex, where: SearchFilter, *terms: int) -> dict[str, float]:
    return {h.qualified_name: h.score for h in index.search([lexical(*terms)], where)[0]}


def everything_seen(index: QdrantIndex, where: SearchFilter) -> list[Any]:
    """Every score the scope is shown: lexical, centred fields over its tools, and server-side fusion."""
    centred = [SignalQuery(f, 10, dense=E0, within=SCOPE.allowed, centre=1.0) for f in ("name", "description")]
    group = [SignalQuery(f, 10, dense=E0) for f in ("name", "description", "params")] + [lexical(A, B)]
    return [
        index.search([lexical(A, B), lexical(C), *centred], where),
        index.fused_search([group], WEIGHTS, 10, where),
        index.fused_search([group], {**WEIGHTS, "lexical": 1.0}, 10, where),
    ]


def test_a_restricted_callers_scores_are_counted_over_its_scope(index: QdrantIndex) -> None:
    index.upsert(HIDDEN)
    assert scores(index, SCOPE, A, B) == pytest.approx(
        {"s__one": idf(2, 2) * 1.0 + idf(2, 1) * 0.5, "s__two": idf(2, 2) * 0.5}, rel=1e-5
    )
    everyone = scores(index, SearchFilter(), A, B)
    assert everyone["s__one"] == pytest.approx(idf(10, 10) * 1.0 + idf(10, 1) * 0.5, rel=1e-5)
    # C is held by hidden tools only: for the scope it is no term, and a query of it finds nothing.
    assert scores(index, SCOPE, C) == {} and len(scores(index, SearchFilter(), C)) == 8
    (fused,) = index.fused_search([[lexical(C)]], {"lexical": 1.0}, 10, SCOPE)
    assert fused == []


def test_hidden_tools_added_or_removed_move_no_score_of_the_scope(index: QdrantIndex) -> None:
    before, everyone = everything_seen(index, SCOPE), everything_seen(index, SearchFilter())
    means = index.scopes.field_means(SCOPE)
    index.upsert(HIDDEN)
    assert everything_seen(index, SCOPE) == before
    np.testing.assert_array_equal(index.scopes.field_means(SCOPE), means)
    assert everything_seen(index, SearchFilter()) != everyone  # the unrestricted caller's statistics moved
    index.delete([p.qualified_name for p in HIDDEN])
    assert everything_seen(index, SCOPE) == before
    assert everything_seen(index, SearchFilter()) == everyone


def test_other_replicas_writes_reach_the_counts_within_the_ttl_read_again_in_the_background(
    index: QdrantIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(qdrant_scopes, "monotonic", lambda: now[0])

    def weight_of_a() -> float:
        return scores(index, SearchFilter(), A)["s__one"]

    assert weight_of_a() == pytest.approx(idf(2, 2), rel=1e-5)
    replica_of(index).upsert(HIDDEN)
    assert weight_of_a() == pytest.approx(idf(2, 2), rel=1e-5)  # until the TTL runs out
    now[0] += TTL_SECONDS
    with index.scopes._reading:  # a read is under way: nothing waits for it, nor starts another
        assert weight_of_a() == pytest.approx(idf(2, 2), rel=1e-5)
        assert index.scopes.refresher is None
    assert weight_of_a() == pytest.approx(idf(2, 2), rel=1e-5)  # the search that finds them stale does not wait
    assert index.scopes.refresher is not None
    index.scopes.refresher.join(timeout=30)
    assert weight_of_a() == pytest.approx(idf(10, 10), rel=1e-5)


def test_this_adapters_writes_during_a_read_of_the_counts_are_kept() -> None:
    def records(*_: Any) -> Iterator[Any]:
        yield _record("a", [A])
        statistics.written([("b", [B]), ("a", None), ("c", [B])])  # between two pages of the scroll
        yield _record("b", [A])  # read before the write

    statistics = ScopeStatistics(records)
    assert statistics.weights([A, B], SearchFilter()) == ([B], [idf(2, 2)])


def test_a_failed_read_again_keeps_the_stale_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    now, reads = [1000.0], [0]
    monkeypatch.setattr(qdrant_scopes, "monotonic", lambda: now[0])

    def records(*_: Any) -> Iterator[Any]:
        reads[0] += 1
        if reads[0] > 1:
            raise IndexBackendError("qdrant index: scroll failed: the server is restarting")
        yield _record("a", [A])

    statistics = ScopeStatistics(records)
    assert statistics.weights([A], SearchFilter()) == ([A], [idf(1, 1)])
    now[0] += TTL_SECONDS
    assert statistics.weights([A], SearchFilter()) == ([A], [idf(1, 1)])
    assert statistics.refresher is not None
    statistics.refresher.join(timeout=30)
    assert reads[0] == 2
    assert statistics.weights([A], SearchFilter()) == ([A], [idf(1, 1)])  # kept; and read again once more
    assert statistics.refresher is not None
    statistics.refresher.join(timeout=30)
    assert reads[0] == 3


def _record(name: str, terms: list[int]) -> Any:
    return SimpleNamespace(payload={"qualified_name": name}, vector={LEXICAL_FIELD: SimpleNamespace(indices=terms)})
