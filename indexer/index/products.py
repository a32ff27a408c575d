"""The scan's matrix product in the BLAS form that is fastest on this machine, for this matrix and query count.

A scan multiplies a few unit queries (1 for a short request, 5-7 for a long one split into parts) by a matrix of
many rows. OpenBLAS has three ways to do it and which one wins depends on the CPU, its caches and the shapes, by
2-3 x either way: on a 2-core AMD EPYC here (one BLAS thread, as the service runs), 6 queries against 10k x 384
rows took 7.1 / 3.6 / 6.2 ms one matrix-vector product per query / `matrix @ queries.T` / `queries @ matrix.T`,
and 100k x 96 took 19.5 / 6.3 / 12.4 ms, where an earlier machine (a Xeon) ran `queries @ matrix.T` fastest at
10k; and at 10k x 384 here 8 queries took 3.5 / 4.4 ms as `matrix @ queries.T` / `queries @ matrix.T`, 128
queries (the texts of many searches scanned together under load) 19.4 / 16.0 ms. So each form is timed on the live
scans themselves, TRIALS times per query count (`query_bucket`), and the fastest median is kept (`Fastest`); the
trials run again when the matrix has doubled or halved in rows. (The reduced scan of a large catalog is an integer
product in ONNX Runtime instead: `int8_rows`.)"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from indexer.fastest import Fastest, power_of_two_at_least

TRIALS = 3
PER_QUERY_UP_TO = 8  # past this many queries one product per query never wins (each reads the whole matrix)


def per_query(queries: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """One matrix-vector product per query: reads the matrix in place, once per query."""
    return np.stack([matrix @ query for query in queries])


def matrix_first(queries: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """`matrix @ queries.T`, transposed back to one contiguous row per query."""
    return np.ascontiguousarray((matrix @ queries.T).T)


def queries_first(queries: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """`queries @ matrix.T`: the matrix as a transposed operand."""
    return queries @ matrix.T


FORMS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "per_query": per_query,
    "matrix_first": matrix_first,
    "queries_first": queries_first,
}
WITHOUT_PER_QUERY = {name: form for name, form in FORMS.items() if name != "per_query"}


class Products:
    """(queries, rows) products of unit queries and the rows of one matrix, each query count in its fastest form.

    Not thread-safe: its caller (the pool matrix) scans under its own lock."""

    def __init__(self) -> None:
        self._fastest = Fastest(TRIALS)
        self._rows_timed = 0

    def __call__(self, queries: np.ndarray, matrix: np.ndarray) -> np.ndarray:
        rows = len(matrix)
        if rows >= 2 * self._rows_timed or 2 * rows < self._rows_timed:
            self._fastest.forget()
            self._rows_timed = max(rows, 1)
        count = query_bucket(len(queries))
        return self._fastest.call(count, FORMS if count <= PER_QUERY_UP_TO else WITHOUT_PER_QUERY, queries, matrix)

    def choices(self) -> dict[int, str]:
        """The form chosen so far per query count (`query_bucket`)."""
        return self._fastest.choices()  # type: ignore[return-value]

    def timings(self, count: int) -> dict[str, list[float]]:
        """The seconds each form took in the trials of a query count (`query_bucket`)."""
        return self._fastest.timings(count)


def query_bucket(count: int) -> int:
    """The query counts that share one choice: each up to PER_QUERY_UP_TO, then by powers of two (under load one
    scan serves the texts of many searches: 8 queries and 128 are best read in different forms)."""
    return count if count <= PER_QUERY_UP_TO else power_of_two_at_least(count)
