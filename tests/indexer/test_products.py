"""The scan's product forms: the same scores whichever is chosen, a choice per query count after the trials."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.index.products import FORMS, PER_QUERY_UP_TO, TRIALS, Products, query_bucket


def _unit(rows: int, seed: int) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((rows, 64)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


@pytest.mark.parametrize("count", [1, 2, 7])
def test_every_form_gives_one_contiguous_row_of_scores_per_query(count: int) -> None:
    matrix, queries = _unit(500, 1), _unit(count, 2)
    expected = queries.astype(np.float64) @ matrix.T.astype(np.float64)
    for form in FORMS.values():
        scores = form(queries, matrix)
        assert scores.shape == (count, 500) and scores.flags.c_contiguous
        np.testing.assert_allclose(scores, expected, atol=1e-5)


def test_each_form_is_timed_trials_times_then_the_fastest_is_kept_per_query_count() -> None:
    products, matrix = Products(), _unit(500, 1)
    for count in (1, 3, 12):
        forms = len(FORMS) if count <= PER_QUERY_UP_TO else len(FORMS) - 1  # past it, never one product per query
        for _ in range(forms * TRIALS - 1):
            products(_unit(count, 3), matrix)
        assert query_bucket(count) not in products.choices()
        products(_unit(count, 3), matrix)
    timings = {count: products.timings(count) for count in (1, 3, 16)}
    assert all(len(seconds) == TRIALS for per_form in timings.values() for seconds in per_form.values())
    assert "per_query" not in timings[16]
    for count, form in products.choices().items():
        medians = {name: float(np.median(seconds)) for name, seconds in timings[count].items()}
        assert form == min(medians, key=medians.__getitem__)
    assert set(products.choices()) == {1, 3, 16}


def test_query_counts_share_a_choice_by_powers_of_two_past_per_query_up_to() -> None:
    assert [query_bucket(n) for n in (1, 7, 8, 9, 16, 17, 100, 128)] == [1, 7, 8, 16, 16, 32, 128, 128]


def test_the_trials_run_again_once_the_matrix_has_doubled_or_halved() -> None:
    products = Products()
    for _ in range(len(FORMS) * TRIALS):
        products(_unit(2, 3), _unit(400, 1))
    assert 2 in products.choices()
    products(_unit(2, 3), _unit(700, 1))
    assert 2 in products.choices()  # less than double: the choice holds
    products(_unit(2, 3), _unit(800, 1))
    assert products.choices() == {}
    for _ in range(len(FORMS) * TRIALS - 1):
        products(_unit(2, 3), _unit(800, 1))
    assert 2 in products.choices()
    products(_unit(2, 3), _unit(399, 1))
    assert products.choices() == {}
