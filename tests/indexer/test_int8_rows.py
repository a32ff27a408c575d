"""The reduced rows as int8 codes: integer scores in the order of the float products, whatever else is scanned."""

from __future__ import annotations

import numpy as np

from indexer.index.int8_rows import GROWTH_ROWS, MASKED, Int8Rows
from indexer.index.pool_matrix import top_rows

AXES = 96


def _rows(count: int, seed: int) -> np.ndarray:
    """Projections whose axes spread by an order of magnitude, as principal components do."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((count, AXES)) * np.linspace(1.0, 0.1, AXES)).astype(np.float32)


def test_codes_rank_rows_as_their_float_products_do() -> None:
    rows, queries = _rows(5000, 1), _rows(20, 2)
    codes = Int8Rows(AXES)
    codes.fit(rows)
    scores = codes.scores(queries, len(rows))
    assert scores.shape == (20, 5000) and scores.dtype == np.int32
    exact = queries @ rows.T
    for own, wanted in zip(scores, exact, strict=True):
        best = set(np.argsort(-wanted)[:50].tolist())
        kept = set(top_rows(own, 400).tolist())  # the pool matrix oversamples the same way (8 x here)
        assert len(best & kept) >= 49
        assert np.corrcoef(own, wanted)[0, 1] > 0.99


def test_a_querys_scores_do_not_depend_on_the_queries_scanned_with_it() -> None:
    rows, queries = _rows(3000, 3), _rows(9, 4)
    codes = Int8Rows(AXES)
    codes.fit(rows)
    together = codes.scores(queries, len(rows))
    for i, query in enumerate(queries):
        np.testing.assert_array_equal(codes.scores(query[None, :], len(rows))[0], together[i])


def test_rows_put_after_the_fit_are_scanned_past_the_spare_columns() -> None:
    rows = _rows(1000, 5)
    codes = Int8Rows(AXES)
    codes.fit(rows)
    newcomer = _rows(1, 6)[0]
    at = 1000 + GROWTH_ROWS + 10  # past the columns reserved at the fit: the codes grow, the earlier ones stay
    codes.put(at, newcomer)
    codes.put(3, 5 * rows[3])  # past an axis's spread: clipped, still the largest along it
    [scores] = codes.scores(newcomer[None, :], at + 1)
    assert int(np.argmax(scores)) in {at, 3}
    assert scores[at] > np.sort(scores[:1000])[-3]
    np.testing.assert_array_equal(scores[1000:at], 0)  # columns never put score nothing
    before = Int8Rows(AXES)
    before.fit(rows)
    np.testing.assert_array_equal(scores[:3], before.scores(newcomer[None, :], 3)[0])


def test_masked_rows_never_reach_the_top() -> None:
    rng = np.random.default_rng(7)
    scores = rng.integers(-50_000, 50_000, 10_000).astype(np.int32)
    scores[::2] = MASKED  # rows outside the filter
    for count in (10, 1600, 5000):
        top = top_rows(scores, count)
        assert len(top) == count and (scores[top] > MASKED).all()
