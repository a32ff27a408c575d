"""The in-memory pool matrix: exact scan for small catalogs, the reduced scan past REDUCE_ABOVE rows."""

from __future__ import annotations

import time

import numpy as np
import pytest

import indexer.index.pool_matrix as pool_matrix
from indexer.index.base import DENSE_FIELDS, SearchFilter
from indexer.index.pool_matrix import PoolMatrix
from indexer.index.products import FORMS, TRIALS, query_bucket

DIMENSION = 384


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=-1, keepdims=True)).astype(np.float32)


def _catalog(rows: int, seed: int = 0) -> np.ndarray:
    """Vectors with a few dozen directions that matter, as sentence embeddings have."""
    rng = np.random.default_rng(seed)
    signal = rng.standard_normal((rows, 40)) @ rng.standard_normal((40, DIMENSION))
    return _unit(signal + 0.3 * rng.standard_normal((rows, DIMENSION)))


def _filled(vectors: np.ndarray) -> PoolMatrix:
    matrix = PoolMatrix(DIMENSION)
    for i, v in enumerate(vectors):
        matrix.put(f"t{i}", v, dict.fromkeys(DENSE_FIELDS, v), server="odd" if i % 2 else "even", tags=())
    return matrix


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_matrix, "REDUCE_ABOVE", 500)


def test_past_the_threshold_the_reduced_scan_keeps_the_exact_pool(small_threshold: None) -> None:
    vectors = _catalog(1200)
    matrix = _filled(vectors)
    assert matrix._axes is not None and matrix._fitted_rows == 1000  # fitted at 500, refitted at 1000
    queries = _unit(vectors[:50] + 0.5 * _catalog(50, seed=1))
    found = matrix.search(queries.tolist(), 20, SearchFilter())
    overlap = []
    for query, hits in zip(queries, found, strict=True):
        exact = np.argsort(-(vectors @ query))[:20]
        overlap.append(len({f"t{i}" for i in exact} & {name for name, _ in hits}) / 20)
        scores = [score for _, score in hits]
        assert scores == sorted(scores, reverse=True)
        for name, score in hits:  # the reported score is the exact cosine
            assert score == pytest.approx(float(vectors[int(name[1:])] @ query), abs=1e-5)
    assert np.mean(overlap) >= 0.98, np.mean(overlap)


def test_the_reduced_scan_keeps_filters_removals_and_rows_added_after_the_fit(small_threshold: None) -> None:
    vectors = _catalog(700)
    matrix = _filled(vectors)
    assert matrix._axes is not None
    newcomer = _catalog(1, seed=7)[0]
    matrix.put("new", newcomer, dict.fromkeys(DENSE_FIELDS, newcomer), server="even", tags=())
    matrix.remove("t0")
    [hits] = matrix.search([newcomer.tolist()], 5, SearchFilter())
    assert hits[0] == ("new", pytest.approx(1.0, abs=1e-5))
    [hits] = matrix.search([vectors[0].tolist()], 50, SearchFilter(servers=frozenset({"odd"})))
    assert hits and all(int(name[1:]) % 2 == 1 for name, _ in hits)
    [hits] = matrix.search([vectors[0].tolist()], 700, SearchFilter())
    assert "t0" not in {name for name, _ in hits}
    [hits] = matrix.search([vectors[3].tolist()], 5, SearchFilter(allowed=frozenset({"t3", "t5"})))
    assert [name for name, _ in hits] == ["t3", "t5"]  # t3 is the query itself


def test_below_the_threshold_the_scan_is_exact() -> None:
    vectors = _catalog(300)
    matrix = _filled(vectors)
    assert matrix._axes is None
    [hits] = matrix.search([vectors[10].tolist()], 10, SearchFilter())
    assert [name for name, _ in hits] == [f"t{i}" for i in np.argsort(-(vectors @ vectors[10]), kind="stable")[:10]]


@pytest.mark.parametrize("texts", [1, 3, 6])
def test_a_scan_of_several_texts_ranks_as_one_product_would(texts: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whichever product form the scan times or chooses (each is tried TRIALS times first), the same ranking."""
    monkeypatch.setattr(pool_matrix, "SMALL_SCOPE", 0)  # the 400 rows of a server scanned with the whole matrix
    vectors = _catalog(800, seed=3)
    matrix = _filled(vectors)
    queries = _catalog(texts, seed=4)
    scans = [
        matrix.search([q.tolist() for q in queries], 10, SearchFilter(servers=("odd",)))
        for _ in range(len(FORMS) * TRIALS + 1)
    ]
    assert query_bucket(texts) in matrix._products.choices()
    found = scans[0]
    for scan in scans:  # the same tools; the scores as exact as the test below asks
        assert [[name for name, _ in hits] for hits in scan] == [[name for name, _ in hits] for hits in found]
    for query, hits in zip(queries, found, strict=True):
        cosines = vectors @ query
        odd = np.arange(1, 800, 2)
        expected = odd[np.argsort(-cosines[odd], kind="stable")[:10]]
        assert [name for name, _ in hits] == [f"t{i}" for i in expected]
        assert [score for _, score in hits] == pytest.approx(cosines[expected].tolist(), abs=1e-5)


def test_field_scores_are_the_exact_cosines_of_the_named_candidates() -> None:
    vectors = _catalog(300, seed=5)
    matrix = _filled(vectors)
    query = _catalog(1, seed=6)[0]
    scores = matrix.field_scores(query, [f"t{i}" for i in range(0, 300, 3)], 5, SearchFilter())
    cosines = vectors[::3] @ query
    best = np.argsort(-cosines)[:5]
    for field in DENSE_FIELDS:
        assert [name for name, _ in scores[field]] == [f"t{3 * i}" for i in best]
        assert [s for _, s in scores[field]] == pytest.approx(cosines[best].tolist(), abs=1e-6)


def test_centred_field_scores_are_cosines_to_the_vectors_minus_the_catalogs_mean() -> None:
    vectors = _catalog(300, seed=7)
    matrix = _filled(vectors)
    replaced = _catalog(1, seed=8)[0]
    matrix.put("t0", replaced, dict.fromkeys(DENSE_FIELDS, replaced), server="even", tags=())
    matrix.remove("t1")
    live = np.vstack([replaced, vectors[2:]])  # the mean follows replacements and removals
    query = _catalog(1, seed=9)[0]
    names = ["t0", *(f"t{i}" for i in range(2, 300, 3))]
    for share in (1.0, 0.5):
        centred = _unit(np.vstack([replaced, vectors[2:300:3]]) - share * live.mean(axis=0))
        cosines = centred @ query
        best = np.argsort(-cosines)[:5]
        scores = matrix.field_scores(query, names, 5, SearchFilter(), centre=share)
        for field in DENSE_FIELDS:
            assert [name for name, _ in scores[field]] == [names[i] for i in best]
            assert [s for _, s in scores[field]] == pytest.approx(cosines[best].tolist(), abs=1e-5)


@pytest.mark.parametrize("reduced", [False, True])
def test_several_requests_scanned_together_get_what_each_gets_alone(
    monkeypatch: pytest.MonkeyPatch, reduced: bool
) -> None:
    if reduced:
        monkeypatch.setattr(pool_matrix, "REDUCE_ABOVE", 500)
    vectors = _catalog(800)
    matrix = _filled(vectors)
    assert (matrix._axes is not None) == reduced
    queries = _unit(vectors[:9] + 0.5 * _catalog(9, seed=2)).tolist()
    requests = [
        (queries[0:1], SearchFilter()),
        (queries[1:4], SearchFilter(servers=("odd",))),  # a long request and its parts
        ([], SearchFilter()),
        (queries[4:6], SearchFilter(allowed=frozenset({"t1", "t2", "t3"}))),  # fewer tools than the limit
        (queries[6:7], SearchFilter(servers=("nowhere",))),
        (queries[7:9], SearchFilter(denied=frozenset({"t0", "t8"}))),
    ]
    together = matrix.search_many(requests, 10)
    alone = [matrix.search(texts, 10, where) for texts, where in requests]
    # One product for 9 queries rounds differently from one per query (float32): the same tools, the same scores
    # to 1e-6.
    assert [[[name for name, _ in hits] for hits in texts] for texts in together] == [
        [[name for name, _ in hits] for hits in texts] for texts in alone
    ]
    for texts_together, texts_alone in zip(together, alone, strict=True):
        for hits_together, hits_alone in zip(texts_together, texts_alone, strict=True):
            assert [s for _, s in hits_together] == pytest.approx([s for _, s in hits_alone], abs=1e-6)
    assert [len(hits) for hits in together[3]] == [3, 3] and together[4] == [[]] and together[2] == []
    assert all(int(name[1:]) % 2 for hits in together[1] for name, _ in hits)


@pytest.mark.parametrize("reduced", [False, True])
def test_a_requests_parts_get_their_own_smaller_pool(monkeypatch: pytest.MonkeyPatch, reduced: bool) -> None:
    if reduced:
        monkeypatch.setattr(pool_matrix, "REDUCE_ABOVE", 500)
    vectors = _catalog(800)
    matrix = _filled(vectors)
    queries = _unit(vectors[:5] + 0.5 * _catalog(5, seed=3)).tolist()
    requests = [(queries[0:3], SearchFilter()), (queries[3:4], SearchFilter()), (queries[4:5], SearchFilter())]
    found = matrix.search_many(requests, 10, part_limit=4)
    assert [[len(hits) for hits in texts] for texts in found] == [[10, 4, 4], [10], [10]]
    # Each text's best, the same as a scan with its own limit (its whole text first, then its parts).
    whole = matrix.search(queries[0:1], 10, SearchFilter())[0]
    parts = matrix.search(queries[1:3], 4, SearchFilter())
    assert [[name for name, _ in hits] for hits in found[0]] == [[name for name, _ in hits] for hits in (whole, *parts)]


@pytest.mark.parametrize("count", [1, 100, 1600, 9000])
def test_top_rows_are_the_highest_scores_whatever_the_sample_finds(count: int) -> None:
    rng = np.random.default_rng(count)
    scores = rng.standard_normal(10_000).astype(np.float32)
    scores[::3] = -np.inf  # rows outside a filter
    scores[-200:] = np.sort(scores[-200:])  # an ordered run: the strided sample sees one end of it only
    kth_best = np.sort(scores)[-count]
    top = pool_matrix.top_rows(scores, count)
    assert len(top) == count == len(set(top.tolist()))
    assert scores[top].min() == kth_best
    # A sample that misses the best rows (they lie between its strides) still gives them: the threshold falls
    # below them, or the whole row is partitioned.
    skewed = np.zeros(10_000, dtype=np.float32)
    skewed[1::16][:count] = 1.0
    assert set(pool_matrix.top_rows(skewed, min(count, 625)).tolist()) == set(
        np.flatnonzero(skewed)[: min(count, 625)].tolist()
    )


def test_a_tag_costs_a_scope_what_its_own_tools_carrying_it_cost_not_the_hidden_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Marking every row of a tag made a caller's search with a tag it sees slower by the tools it may not see that
    # carry it (0.6 ms a search at 10,000 over HTTP): a count of them, told by timing.
    monkeypatch.setattr(pool_matrix, "REDUCE_ABOVE", 10**9)
    matrix = PoolMatrix(8)
    vector = [1.0] + [0.0] * 7
    for i in range(100_000):
        matrix.put(f"hidden{i}", vector, dict.fromkeys(DENSE_FIELDS, vector), server="vault", tags=("shared",))
    matrix.put("mine_a", vector, dict.fromkeys(DENSE_FIELDS, vector), server="public", tags=("shared",))
    matrix.put("mine_b", vector, dict.fromkeys(DENSE_FIELDS, vector), server="public", tags=("own",))
    allowed = frozenset({"mine_a", "mine_b"})

    def seen(tag: str) -> set[str]:
        return {name for name, _ in matrix.search([vector], 10, SearchFilter(tags=(tag,), allowed=allowed))[0]}

    assert (seen("shared"), seen("own")) == ({"mine_a"}, {"mine_b"})

    def median_ms(tag: str) -> float:
        where, used, times = SearchFilter(tags=(tag,), allowed=allowed), len(matrix), []
        for _ in range(41):
            started = time.perf_counter()
            matrix._mask(where, used)
            times.append((time.perf_counter() - started) * 1000)
        return float(np.median(times))

    shared, own = median_ms("shared"), median_ms("own")
    assert shared - own < 0.5, (shared, own)  # 9.7 ms against 0.02 before
    matrix.relabel("mine_b", tags=("shared",))  # a scope's tag rows follow a payload update
    assert seen("shared") == {"mine_a", "mine_b"} and seen("own") == set()


def test_centred_fields_score_a_unit_query_as_field_scores_does() -> None:
    """What a learned query map trains on (service/usage/adapter.py): a unit query's dot product with a tool's centred
    field vector is the centred cosine `field_scores` gives it, inside a filter's permissions too."""
    vectors = _catalog(200, seed=3)
    matrix = _filled(vectors)
    query = _unit(np.random.default_rng(4).standard_normal(DIMENSION))
    where = SearchFilter(allowed=frozenset(f"t{i}" for i in range(0, 200, 2)))
    names, fields = matrix.centred_fields(["t4", "t8", "unknown", "t10"], where, centre=1.0)
    assert names == ["t4", "t8", "t10"] and fields.shape == (3, len(DENSE_FIELDS), DIMENSION)
    scored = matrix.field_scores(query, names, 3, where, centre=1.0)
    for f, field in enumerate(DENSE_FIELDS):
        expected = {h.qualified_name: h.score for h in scored[field]}
        assert {n: float(fields[i, f] @ query) for i, n in enumerate(names)} == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("reduced", [False, True])
def test_a_small_scope_is_scanned_alone_and_exactly(monkeypatch: pytest.MonkeyPatch, reduced: bool) -> None:
    """A caller allowed few tools had the whole matrix scanned for it, so its search took longer the more tools it
    may not see (a dev allowed 2 tools: 1.3 ms a search among 5k tools, 6.4 ms among 50k, in process); its own rows
    are scanned now (1.1 ms at 50k), exactly even past REDUCE_ABOVE."""
    if reduced:
        monkeypatch.setattr(pool_matrix, "REDUCE_ABOVE", 500)
    vectors = _catalog(3000)
    matrix = _filled(vectors)
    scanned: list[int] = []
    products = matrix._products

    def counted(queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        scanned.append(len(rows))
        return products(queries, rows)

    matrix._products = counted  # type: ignore[method-assign]
    if reduced:
        reduced_scores = matrix._reduced.scores
        monkeypatch.setattr(matrix._reduced, "scores", lambda *a: scanned.append(-1) or reduced_scores(*a))
    own = np.arange(0, 3000, 60)
    queries = _unit(vectors[own[:3]] + 0.5 * _catalog(3, seed=4))
    where = SearchFilter(allowed=frozenset(f"t{i}" for i in own), denied=frozenset({"t60"}))
    found = matrix.search(queries.tolist(), 10, where)
    assert scanned == []
    kept = own[own != 60]
    for query, hits in zip(queries, found, strict=True):
        exact = vectors[kept] @ query
        best = np.argsort(-exact, kind="stable")[:10]
        assert [name for name, _ in hits] == [f"t{kept[i]}" for i in best]
        assert [score for _, score in hits] == pytest.approx(exact[best].tolist(), abs=1e-6)
    assert matrix.search(queries.tolist(), 10, SearchFilter(servers=("odd",)))[0] and scanned  # a wide scope scans all
