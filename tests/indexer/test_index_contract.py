"""The VectorIndex contract, run on both adapters: the embedded qdrant-edge shard and qdrant-client :memory:.

Vectors are hand-made in dimension 8: a point at angle θ in the e0/e1 plane has cosine cos θ to the query e0,
so every expected order and score is known exactly."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from indexer.index.base import (
    Hit,
    IndexBackendError,
    IndexPoint,
    SearchFilter,
    SignalQuery,
    VectorIndex,
    pooled_search,
)
from indexer.index.edge import EdgeIndex
from indexer.index.factory import open_index
from indexer.lexical import SparseVector

DIM = 8
NOTHING = SearchFilter()
COMMON, RARE, OTHER = 11, 22, 33  # sparse term indices


def angle(degrees: float) -> list[float]:
    """A unit vector at `degrees` from e0 towards e1."""
    rad = math.radians(degrees)
    return [math.cos(rad), math.sin(rad)] + [0.0] * (DIM - 2)


E0 = angle(0)


def point(
    name: str,
    *,
    server: str = "s1",
    tags: tuple[str, ...] = (),
    angles: tuple[float, float, float] = (0, 0, 0),
    lexical: dict[int, float] | None = None,
    content_hash: str = "",
    **extra: object,
) -> IndexPoint:
    """A point whose name/description/params vectors sit at the given angles from e0."""
    terms = lexical or {OTHER: 1.0}
    return IndexPoint(
        qualified_name=name,
        vectors={field: angle(a) for field, a in zip(("name", "description", "params"), angles, strict=True)},
        lexical=SparseVector(sorted(terms), [terms[i] for i in sorted(terms)]),
        payload={
            "server": server,
            "tags": list(tags),
            "content_hash": content_hash or f"hash-{name}",
            **extra,
        },
    )


# name order for e0: a b c d; description order: d c b a; params order: b d a c.
# Only c holds the rare term; a holds the common term with three times the weight of b and c, six times d's.
CATALOG = [
    point("s1.a", server="s1", tags=("x",), angles=(0, 90, 60), lexical={COMMON: 3.0}),
    point("s2.b", server="s2", tags=("y",), angles=(30, 60, 0), lexical={COMMON: 1.0}),
    point("s1.c", server="s1", tags=("x", "y"), angles=(60, 30, 90), lexical={COMMON: 1.0, RARE: 1.0}),
    point("s2.d", server="s2", tags=(), angles=(90, 0, 30), lexical={COMMON: 0.5, OTHER: 1.0}),
]


def dense(signal: str, limit: int = 10, vector: list[float] = E0) -> SignalQuery:
    return SignalQuery(signal=signal, limit=limit, dense=vector)  # type: ignore[arg-type]


def lexical(*terms: int, limit: int = 10) -> SignalQuery:
    return SignalQuery(signal="lexical", limit=limit, sparse=SparseVector(sorted(terms), [1.0] * len(terms)))


def names(hits: list[Hit]) -> list[str]:
    return [h.qualified_name for h in hits]


def search_one(index: VectorIndex, query: SignalQuery, where: SearchFilter = NOTHING) -> list[Hit]:
    (hits,) = index.search([query], where)
    return hits


def open_backend(backend: str, path: Path) -> VectorIndex:
    url = ":memory:" if backend == "qdrant" else None
    return open_index(backend, path=path, url=url, api_key=None, collection="contract", dimension=DIM)


@pytest.fixture(params=["edge", "qdrant"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    opened = open_backend(request.param, tmp_path / "index")
    yield opened
    opened.close()


@pytest.fixture
def catalog(index: VectorIndex) -> VectorIndex:
    index.upsert(CATALOG)
    return index


def test_empty_index(index: VectorIndex) -> None:
    assert index.count() == 0
    assert index.content_hashes() == {}
    assert index.search([dense("name"), lexical(COMMON)], NOTHING) == [[], []]
    assert index.search([], NOTHING) == []


def test_ensure_collection_is_idempotent(catalog: VectorIndex) -> None:
    catalog.ensure_collection()
    assert catalog.count() == 4


def test_upsert_then_count_and_content_hashes(index: VectorIndex) -> None:
    index.upsert(CATALOG[:3])
    assert index.count() == 3
    index.upsert(CATALOG[3:])
    assert index.count() == 4
    assert index.content_hashes() == {
        "s1.a": "hash-s1.a",
        "s2.b": "hash-s2.b",
        "s1.c": "hash-s1.c",
        "s2.d": "hash-s2.d",
    }
    index.upsert([])
    assert index.count() == 4


def test_content_hashes_pages_through_many_points(index: VectorIndex) -> None:
    many = [point(f"s.t{i}", angles=(i % 90, 0, 0), content_hash=f"h{i}") for i in range(2500)]
    index.upsert(many)
    assert index.content_hashes() == {f"s.t{i}": f"h{i}" for i in range(2500)}


def test_reupsert_replaces_payload_and_vectors(index: VectorIndex) -> None:
    index.upsert([point("s1.a", angles=(0, 0, 0), content_hash="h1", stale=True)])
    index.upsert([point("s1.a", server="s9", angles=(90, 0, 0), content_hash="h2")])
    assert index.count() == 1
    assert index.content_hashes() == {"s1.a": "h2"}
    (hit,) = search_one(index, dense("name", vector=angle(90)))
    assert hit.score == pytest.approx(1.0, abs=1e-5)
    payload = index.payloads(["s1.a"])["s1.a"]
    assert payload["server"] == "s9"
    assert "stale" not in payload
    (old,) = search_one(index, dense("name"))
    assert old.score == pytest.approx(0.0, abs=1e-5)


def test_delete_removes_and_ignores_unknown(catalog: VectorIndex) -> None:
    catalog.delete(["s1.a", "nobody.nothing"])
    catalog.delete([])
    assert catalog.count() == 3
    assert set(catalog.content_hashes()) == {"s2.b", "s1.c", "s2.d"}
    assert names(search_one(catalog, dense("name"))) == ["s2.b", "s1.c", "s2.d"]


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        ("name", ["s1.a", "s2.b", "s1.c", "s2.d"]),
        ("description", ["s2.d", "s1.c", "s2.b", "s1.a"]),
        ("params", ["s2.b", "s2.d", "s1.a", "s1.c"]),
    ],
)
def test_dense_search_per_field(catalog: VectorIndex, signal: str, expected: list[str]) -> None:
    hits = search_one(catalog, dense(signal))
    assert names(hits) == expected
    cosines = [1.0, math.cos(math.radians(30)), 0.5, 0.0]
    assert [h.score for h in hits] == pytest.approx(cosines, abs=1e-5)
    assert hits[0] == (expected[0], pytest.approx(1.0, abs=1e-5))  # search carries names and scores only
    assert catalog.payloads([expected[0]])[expected[0]]["content_hash"] == f"hash-{expected[0]}"
    assert names(search_one(catalog, dense(signal, limit=2))) == expected[:2]


def test_lexical_search_applies_idf(catalog: VectorIndex) -> None:
    hits = search_one(catalog, lexical(COMMON, RARE))
    # without IDF s1.a (common term, weight 3) would win; with IDF the rare term dominates
    assert names(hits)[0] == "s1.c"
    assert names(hits)[1] == "s1.a"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert set(names(hits)) == {"s1.a", "s2.b", "s1.c", "s2.d"}
    assert names(search_one(catalog, lexical(RARE))) == ["s1.c"]  # only points sharing a term
    assert search_one(catalog, lexical(999)) == []


@pytest.mark.parametrize(
    ("where", "best"),
    [
        (SearchFilter(servers=("s2",)), "s2.b"),
        (SearchFilter(tags=("y",)), "s2.b"),
        (SearchFilter(tags=("x",)), "s1.a"),
        (SearchFilter(allowed=frozenset({"s1.c", "s2.d"})), "s1.c"),
        (SearchFilter(denied=frozenset({"s1.a", "s2.b"})), "s1.c"),
        (SearchFilter(allowed=frozenset({"s1.a", "s2.b", "s1.c"}), denied=frozenset({"s1.a"})), "s2.b"),
        (SearchFilter(servers=("s1",), tags=("y",)), "s1.c"),
        (SearchFilter(servers=("s1", "s2"), tags=("z", "y"), denied=frozenset({"s2.b"})), "s1.c"),
    ],
)
def test_filters_apply_inside_the_query(catalog: VectorIndex, where: SearchFilter, best: str) -> None:
    # limit=1: a post-filter would return nothing (the global best, s1.a, is filtered out in most cases)
    (dense_hits,) = catalog.search([dense("name", limit=1)], where)
    assert names(dense_hits) == [best]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (NOTHING, ["s2.b", "s2.d", "s1.a", "s1.c"]),
        (SearchFilter(servers=("s2",)), ["s2.b", "s2.d"]),
        (SearchFilter(tags=("y",)), ["s2.b", "s1.c"]),
        (SearchFilter(tags=("x",)), ["s1.a", "s1.c"]),
        (SearchFilter(allowed=frozenset({"s1.c", "s2.d", "gone"})), ["s2.d", "s1.c"]),
        (SearchFilter(denied=frozenset({"s1.a", "s2.b"})), ["s2.d", "s1.c"]),
        (SearchFilter(allowed=frozenset({"s1.a", "s2.b", "s1.c"}), denied=frozenset({"s1.a"})), ["s2.b", "s1.c"]),
        (SearchFilter(servers=("s1",), tags=("y",)), ["s1.c"]),
        (SearchFilter(servers=("s1", "s2"), tags=("z", "y"), denied=frozenset({"s2.b"})), ["s1.c"]),
        (SearchFilter(servers=("unknown",)), []),
    ],
)
def test_the_tool_vector_scan_applies_every_filter(
    catalog: VectorIndex, where: SearchFilter, expected: list[str]
) -> None:
    assert names(search_one(catalog, dense("tool"), where)) == expected
    assert names(search_one(catalog, dense("tool", limit=1), where)) == expected[:1]


def test_the_tool_vector_scan_follows_upserts_and_deletes(catalog: VectorIndex) -> None:
    catalog.delete(["s2.b"])
    catalog.upsert([point("s1.e", server="s3", tags=("z",), angles=(0, 0, 0))])
    catalog.upsert([point("s2.d", server="s1", tags=("x",), angles=(90, 90, 90))])  # moved and turned away
    assert names(search_one(catalog, dense("tool"))) == ["s1.e", "s1.a", "s1.c", "s2.d"]
    assert names(search_one(catalog, dense("tool"), SearchFilter(servers=("s2",)))) == []
    assert names(search_one(catalog, dense("tool"), SearchFilter(tags=("x",)))) == ["s1.a", "s1.c", "s2.d"]
    assert names(search_one(catalog, dense("tool"), SearchFilter(tags=("z",)))) == ["s1.e"]


def test_filters_apply_to_lexical_queries(catalog: VectorIndex) -> None:
    assert names(search_one(catalog, lexical(COMMON, RARE, limit=1), SearchFilter(servers=("s2",)))) == ["s2.b"]
    assert search_one(catalog, lexical(RARE), SearchFilter(denied=frozenset({"s1.c"}))) == []
    assert names(search_one(catalog, lexical(COMMON), SearchFilter(tags=("x",)))) == ["s1.a", "s1.c"]


def test_filter_without_any_match_returns_nothing(catalog: VectorIndex) -> None:
    assert catalog.search([dense("name"), lexical(COMMON)], SearchFilter(tags=("none",))) == [[], []]
    assert search_one(catalog, dense("name"), SearchFilter(servers=("unknown",))) == []


@pytest.mark.parametrize(
    "where",
    [
        SearchFilter(allowed=frozenset()),
        SearchFilter(allowed=frozenset({"s1.a"}), denied=frozenset({"s1.a"})),
    ],
)
def test_matches_nothing_returns_empty_lists(catalog: VectorIndex, where: SearchFilter) -> None:
    assert where.matches_nothing
    assert catalog.search([dense("name"), dense("params"), lexical(COMMON)], where) == [[], [], []]


def test_payloads_of_named_points(catalog: VectorIndex) -> None:
    found = catalog.payloads(["s1.a", "s2.d", "nobody.nothing"])
    assert set(found) == {"s1.a", "s2.d"}
    assert found["s1.a"] == {
        "qualified_name": "s1.a",
        "server": "s1",
        "tags": ["x"],
        "content_hash": "hash-s1.a",
    }
    assert found["s2.d"]["tags"] == []
    assert catalog.payloads([]) == {}


def test_set_payload_merges(catalog: VectorIndex) -> None:
    catalog.set_payload("s1.a", {"uses": 3, "success_rate": 0.5})
    catalog.set_payload("s1.a", {"uses": 4})
    catalog.set_payload("nobody.nothing", {"uses": 1})  # ignored
    hit = search_one(catalog, dense("name", limit=1))[0]
    assert hit.qualified_name == "s1.a"
    payload = catalog.payloads(["s1.a"])["s1.a"]
    assert payload["uses"] == 4
    assert payload["success_rate"] == 0.5
    assert payload["server"] == "s1"
    assert payload["tags"] == ["x"]
    assert catalog.count() == 4
    assert catalog.content_hashes()["s1.a"] == "hash-s1.a"


def test_payloads_read_again_follow_every_write(catalog: VectorIndex) -> None:
    """The edge adapter answers recent payloads from memory: what it gives after a write is the write's result,
    and a caller changing what it was given changes nothing stored."""
    first = catalog.payloads(["s1.a", "s2.b"])
    first["s1.a"]["server"] = "changed by the caller"
    assert catalog.payloads(["s1.a"])["s1.a"]["server"] == "s1"
    catalog.set_payload("s1.a", {"uses": 2})
    assert catalog.payloads(["s1.a"])["s1.a"]["uses"] == 2
    catalog.upsert([point("s2.b", server="s2", content_hash="hash-new")])
    assert catalog.payloads(["s2.b"])["s2.b"]["content_hash"] == "hash-new"
    catalog.delete(["s1.a"])
    assert catalog.payloads(["s1.a", "s2.b"]).keys() == {"s2.b"}
    cached = getattr(catalog, "cached_payloads", None)
    if cached is not None:  # the edge adapter: read once, held in memory until a write to that point
        assert cached(["s1.a", "s2.b", "s1.c"]).keys() == {"s2.b"}


def test_several_signal_queries_at_once(catalog: VectorIndex) -> None:
    queries = [dense("name", limit=1), dense("description", limit=2), dense("params", limit=3), lexical(RARE)]
    results = catalog.search(queries, SearchFilter(denied=frozenset({"s2.d"})))
    assert [names(hits) for hits in results] == [
        ["s1.a"],
        ["s1.c", "s2.b"],
        ["s2.b", "s1.a", "s1.c"],
        ["s1.c"],
    ]


def test_tool_vector_is_the_normalised_sum_of_the_field_vectors(catalog: VectorIndex) -> None:
    # s2.b (30, 60, 0): sum (2.366, 1.366), cosine .866; s2.d (90, 0, 30) .779; s1.a .627; s1.c .5.
    hits = search_one(catalog, dense("tool"))
    assert names(hits) == ["s2.b", "s2.d", "s1.a", "s1.c"]
    assert [round(h.score, 3) for h in hits] == [0.866, 0.779, 0.627, 0.5]


def test_a_query_within_named_tools_scores_only_those(catalog: VectorIndex) -> None:
    within = SignalQuery(signal="description", limit=10, dense=E0, within=frozenset({"s1.a", "s2.b", "gone"}))
    hits = search_one(catalog, within)
    assert names(hits) == ["s2.b", "s1.a"] and [round(h.score, 3) for h in hits] == [0.5, 0.0]
    assert names(search_one(catalog, within, SearchFilter(servers=("s1",)))) == ["s1.a"]


def test_pooled_search_gives_the_full_scans_when_the_pool_holds_every_tool(catalog: VectorIndex) -> None:
    texts = [(E0, SparseVector([COMMON], [1.0])), (angle(90), SparseVector([RARE], [1.0]))]
    pooled = pooled_search(catalog, texts, NOTHING, pool=10, limit=2)
    full = catalog.search(
        [q for v, s in texts for q in (dense("name", 2, v), dense("description", 2, v), dense("params", 2, v))]
        + [SignalQuery(signal="lexical", limit=2, sparse=s) for _, s in texts],
        NOTHING,
    )
    assert [names(h) for h in pooled] == [names(h) for h in full[0:3] + full[6:7] + full[3:6] + full[7:8]]
    # Tag y and a pool of one: the fields rank only s2.b (best tool vector) and the lexical hits s2.b, s1.c.
    small = pooled_search(catalog, texts[:1], SearchFilter(tags=("y",)), pool=1, limit=10)
    assert [names(h) for h in small[:3]] == [["s2.b", "s1.c"], ["s1.c", "s2.b"], ["s2.b", "s1.c"]]
    assert sorted(names(small[3])) == ["s1.c", "s2.b"]  # equal BM25 weights


def test_centred_field_queries_score_against_the_catalogs_mean_removed(catalog: VectorIndex) -> None:
    means = {f: sum(np.array(p.vectors[f]) for p in CATALOG) / len(CATALOG) for f in ("name", "description")}
    query = angle(20)
    for field, share in (("name", 1.0), ("description", 0.5)):
        within = frozenset({"s1.a", "s2.b", "s1.c"})
        hits = search_one(catalog, SignalQuery(field, 2, dense=query, within=within, centre=share))  # type: ignore[arg-type]
        expected = {}
        for p in CATALOG:
            if p.qualified_name in within:
                centred = np.array(p.vectors[field]) - share * means[field]
                expected[p.qualified_name] = float(centred @ np.array(query) / np.linalg.norm(centred))
        best = sorted(expected, key=expected.__getitem__, reverse=True)[:2]
        assert names(hits) == best
        assert [h.score for h in hits] == pytest.approx([expected[n] for n in best], abs=1e-5)


def test_signal_query_without_its_vector_is_rejected(catalog: VectorIndex) -> None:
    with pytest.raises(ValueError):
        catalog.search([SignalQuery(signal="name", limit=1)], NOTHING)
    with pytest.raises(ValueError):
        catalog.search([SignalQuery(signal="lexical", limit=1)], NOTHING)


def test_edge_index_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "edge"
    first = open_backend("edge", path)
    first.upsert(CATALOG)
    first.delete(["s2.d"])
    first.set_payload("s1.a", {"uses": 7})
    first.close()

    again = open_backend("edge", path)
    try:
        assert again.count() == 3
        assert again.content_hashes() == {"s1.a": "hash-s1.a", "s2.b": "hash-s2.b", "s1.c": "hash-s1.c"}
        name_hits, lexical_hits = again.search([dense("name"), lexical(COMMON, RARE)], SearchFilter(servers=("s1",)))
        assert names(name_hits) == ["s1.a", "s1.c"]
        assert again.payloads(["s1.a"])["s1.a"]["uses"] == 7
        assert names(lexical_hits) == ["s1.c", "s1.a"]
        assert names(search_one(again, dense("tool"))) == ["s2.b", "s1.a", "s1.c"]  # the pool matrix, reloaded
    finally:
        again.close()


def test_an_edge_shard_of_an_older_layout_is_rebuilt_empty(tmp_path: Path) -> None:
    """A shard without the `tool` vector (written before it existed) is replaced; start-up refills it."""
    import qdrant_edge as qe

    path = tmp_path / "edge"
    vectors = {f: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine) for f in ("name", "description", "params")}
    old = qe.EdgeShard.create(str(path), qe.EdgeConfig(vectors=vectors))
    old.update(qe.UpdateOperation.upsert_points([qe.Point(1, {f: E0 for f in vectors}, {"qualified_name": "x"})]))
    old.close()
    rebuilt = EdgeIndex(path, DIM)
    try:
        assert rebuilt.count() == 0
        rebuilt.upsert(CATALOG)
        assert names(search_one(rebuilt, dense("tool")))[0] == "s2.b"
    finally:
        rebuilt.close()


def test_edge_shard_is_locked_while_open(tmp_path: Path) -> None:
    first = EdgeIndex(tmp_path / "edge", DIM)
    try:
        with pytest.raises(IndexBackendError):
            EdgeIndex(tmp_path / "edge", DIM)
    finally:
        first.close()
    EdgeIndex(tmp_path / "edge", DIM).close()  # the lock is released on close


def test_edge_reopen_with_another_dimension_fails(tmp_path: Path) -> None:
    EdgeIndex(tmp_path / "edge", DIM).close()
    with pytest.raises(IndexBackendError):
        EdgeIndex(tmp_path / "edge", DIM * 2)


def test_open_index_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        open_index("faiss", path=tmp_path, url=None, api_key=None, collection="c", dimension=DIM)
    with pytest.raises(ValueError):
        open_index("edge", path=None, url=None, api_key=None, collection="c", dimension=DIM)
    with pytest.raises(ValueError):
        open_index("qdrant", path=None, url=None, api_key=None, collection="c", dimension=DIM)


def test_term_holders_counts_the_tools_of_the_permissions_only(catalog: VectorIndex) -> None:
    assert catalog.term_holders([COMMON, RARE, 999], NOTHING) == [4, 1, 0]
    assert catalog.term_holders([COMMON, RARE], SearchFilter(allowed=frozenset({"s1.a", "s2.b"}))) == [2, 0]
    assert catalog.term_holders([COMMON, RARE], SearchFilter(denied=frozenset({"s1.c"}))) == [3, 0]
