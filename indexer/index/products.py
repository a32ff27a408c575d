"""The scan's matrix product in the BLAS form that is fastest on this machine, for this matrix and query count.

A scan multiplies a few unit queries (1 for a short request, 5-7 for a long one split into parts) by a matrix of
many rows. OpenBLAS has three ways to do it and which one wins depends on the CPU, its caches and the shapes, by
2-3 x either way: on a 2-core AMD EPYC here (one BLAS thread, as the service runs), 6 queries against 10k x 384
rows took 7.1 / 3.6 / 6.2 ms one matrix-vector product per query / `matrix @ queries.T` / `queries @ matrix.T`,
and 100k x 96 took 19.5 / 6.3 / 12.4 ms, where an earlier machine (a Xeon) ran `queries @ matrix.T` fastest at
10k; and at 10k x 384 here 8 queries took 3.5 / 4.4 ms as `matrix @ queries.T` / `queries @ matrix.T`, 128
queries (the texts of many searches scanned together under load) 19.4 / 16.0 ms. So each form is timed on the live
scans themselves, TRIALS times per query count (`query_bucket`), and the fastest median is kept (`Fastest`); the
trials run again when the matrix has doubled or halved in rows.

One more form for the reduced scan of a large catalog (`Products(halves=True)`), where the machine has more than
one core: `matrix_first` with the matrix's second half on a helper thread. The service runs BLAS on one thread (its
threads are the searches'), so a lone search's scan read main memory on one core of two while the other idled: on a
2-core Xeon here, 100k x 96 rows and 6 queries (a long request's texts) 4.1 -> 2.4 ms, a long request's whole index
step 10.2 -> 8.2 ms in process. Not for the exact scan below REDUCE_ABOVE rows: 10k x 384 and 6 queries took 1.41 ->
0.91 ms alone, but served, long requests at 10k tools were no faster (12.0 / 12.0 / 13.7 ms p50 before, 13.4 /
15.3 / 20.7 after, in turn in one noisy sitting)."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

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


_HALF_THREAD = ThreadPoolExecutor(1, thread_name_prefix="scan-half")


def halves(queries: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """`matrix_first` with the second half of the rows multiplied on another thread at the same time (BLAS
    releases the GIL)."""
    cut = len(matrix) // 2
    out = np.empty((len(matrix), len(queries)), dtype=np.result_type(queries, matrix))
    other = _HALF_THREAD.submit(np.matmul, matrix[cut:], queries.T, out=out[cut:])
    np.matmul(matrix[:cut], queries.T, out=out[:cut])
    other.result()
    return np.ascontiguousarray(out.T)


FORMS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "per_query": per_query,
    "matrix_first": matrix_first,
    "queries_first": queries_first,
}
WITHOUT_PER_QUERY = {name: form for name, form in FORMS.items() if name != "per_query"}
WITH_HALVES = {**FORMS, "halves": halves} if (os.cpu_count() or 1) > 1 else FORMS
WITH_HALVES_WITHOUT_PER_QUERY = {name: form for name, form in WITH_HALVES.items() if name != "per_query"}


class Products:
    """(queries, rows) products of unit queries and the rows of one matrix, each query count in its fastest form.

    Not thread-safe: its caller (the pool matrix) scans under its own lock."""

    def __init__(self, halves: bool = False) -> None:
        self._forms = (WITH_HALVES, WITH_HALVES_WITHOUT_PER_QUERY) if halves else (FORMS, WITHOUT_PER_QUERY)
        self._fastest = Fastest(TRIALS)
        self._rows_timed = 0

    def __call__(self, queries: np.ndarray, matrix: np.ndarray) -> np.ndarray:
        rows = len(matrix)
        if rows >= 2 * self._rows_timed or 2 * rows < self._rows_timed:
            self._fastest.forget()
            self._rows_timed = max(rows, 1)
        count = query_bucket(len(queries))
        return self._fastest.call(
            count, self._forms[0] if count <= PER_QUERY_UP_TO else self._forms[1], queries, matrix
        )

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
