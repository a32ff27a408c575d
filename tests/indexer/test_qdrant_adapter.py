"""The Qdrant adapter beyond the shared contract: server-side fusion, options, retries (qdrant-client ':memory:')."""

from __future__ import annotations

import pytest
from qdrant_client import models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from indexer.index.base import INDEXED_VECTORS, LEXICAL_FIELD, IndexBackendError, SearchFilter, SignalQuery
from indexer.index.qdrant import QdrantIndex, QdrantOptions
from indexer.lexical import SparseVector
from tests.indexer.test_index_contract import COMMON, DIM, E0, RARE, lexical, point

WEIGHTS = {"name": 0.1, "description": 0.45, "params": 0.1, "lexical": 0.35}


def _index(**options: object) -> QdrantIndex:
    index = QdrantIndex(":memory:", "fusion", DIM, options=QdrantOptions(**options))  # type: ignore[arg-type]
    index.ensure_collection()
    index.upsert(
        [
            point("a", angles=(0, 80, 40), lexical={COMMON: 3.0}),
            point("b", angles=(10, 60, 0), lexical={COMMON: 1.0}),
            point("c", angles=(20, 5, 60), lexical={RARE: 1.0}, server="s2"),
            point("d", angles=(30, 0, 20)),
        ]
    )
    return index


def _group(limit: int = 10) -> list[SignalQuery]:
    sparse = SparseVector([RARE], [1.0])
    return [SignalQuery(f, limit, dense=E0) for f in ("name", "description", "params")] + [
        SignalQuery("lexical", limit, sparse=sparse)
    ]


@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
def test_fused_search_ranks_by_every_signal_inside_the_filter(fusion: str) -> None:
    index = _index(fusion=fusion)
    try:
        (hits,) = index.fused_search([_group()], WEIGHTS, 3, SearchFilter())
        (only_s1,) = index.fused_search([_group()], WEIGHTS, 10, SearchFilter(servers=("s1",)))
        nothing = index.fused_search([_group()], WEIGHTS, 10, SearchFilter(allowed=frozenset()))
    finally:
        index.close()
    # c is close in description (the heaviest dense weight) and the only holder of the rare term.
    assert hits[0].qualified_name == "c" and len(hits) == 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {h.qualified_name for h in only_s1} == {"a", "b", "d"}
    assert nothing == [[]]


def test_a_zero_weight_signal_is_not_prefetched() -> None:
    index = _index()
    try:
        weights = {"name": 1.0, "description": 0.0, "params": 0.0, "lexical": 0.0}
        (hits,) = index.fused_search([_group()], weights, 4, SearchFilter())
    finally:
        index.close()
    assert [h.qualified_name for h in hits] == ["a", "b", "c", "d"]  # name angles 0, 10, 20, 30


def test_transient_failures_are_retried_with_backoff_and_others_are_not() -> None:
    index = _index(retries=2, retry_backoff_seconds=0.01)
    index._local = False  # the retry policy of a server connection, exercised on the local client
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ResponseHandlingException(ConnectionError("connection refused"))
        return "ok"

    def always_down() -> str:
        attempts.append(1)
        raise ResponseHandlingException(OSError("unreachable"))

    def bad_request() -> str:
        attempts.append(1)
        raise UnexpectedResponse(400, "Bad Request", b"{}", None)  # type: ignore[arg-type]

    try:
        assert index._call("flaky", flaky) == "ok" and len(attempts) == 3
        attempts.clear()
        with pytest.raises(IndexBackendError, match="bad_request failed"):
            index._call("bad_request", bad_request)
        assert len(attempts) == 1
        attempts.clear()
        with pytest.raises(IndexBackendError, match="down failed"):
            index._call("down", always_down)
        assert len(attempts) == 3  # the first try and two retries
    finally:
        index._local = True
        index.close()


def test_server_queries_use_hnsw_with_a_beam_at_least_the_limit() -> None:
    index = _index(hnsw_ef=64)
    try:
        assert index._search_params(10) is None  # local mode is exact by construction
        index._local = False
        assert index._search_params(10).hnsw_ef == 64  # type: ignore[union-attr]
        assert index._search_params(200).hnsw_ef == 200  # type: ignore[union-attr]
        assert index._search_params(10).exact in (None, False)  # type: ignore[union-attr]
    finally:
        index._local = True
        index.close()


def test_ensure_collection_on_an_existing_collection_checks_the_dimension() -> None:
    index = _index()
    try:
        index.ensure_collection()  # again: nothing to create
        assert index.count() == 4
        index.dimension = DIM + 1
        with pytest.raises(IndexBackendError, match="expected size"):
            index.ensure_collection()
    finally:
        index.close()


def old_layout(index: QdrantIndex) -> None:
    """The index's collection as earlier versions created it: Qdrant's IDF modifier on the lexical vectors."""
    index._client.create_collection(
        index.collection,
        vectors_config={
            name: models.VectorParams(size=index.dimension, distance=models.Distance.COSINE) for name in INDEXED_VECTORS
        },
        sparse_vectors_config={LEXICAL_FIELD: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )


def test_a_collection_with_qdrants_own_idf_is_an_older_layout_and_is_recreated() -> None:
    index = QdrantIndex(":memory:", "old", DIM)
    try:
        old_layout(index)
        index.upsert([point("s__one", lexical={COMMON: 1.0})])
        assert index.search([lexical(COMMON)], SearchFilter())[0]
        index.ensure_collection()  # emptied: the catalog of record refills it at start (reconcile_index)
        assert index.count() == 0
        assert index.search([lexical(COMMON)], SearchFilter()) == [[]]  # the counts of the old one went with it
        sparse = index._client.get_collection("old").config.params.sparse_vectors or {}
        assert sparse[LEXICAL_FIELD].modifier in (None, models.Modifier.NONE)
        index.upsert([point("s__one", lexical={COMMON: 1.0})])
        index.ensure_collection()  # the new layout is kept
        assert index.count() == 1
    finally:
        index.close()
