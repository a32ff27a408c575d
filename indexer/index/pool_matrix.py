"""The vectors of the embedded shard held in memory: the `tool` vectors as one float32 matrix, for the one full
scan of a search, and the field vectors, for the exact per-field scores of its candidates.

qdrant-edge holds the GIL for the whole of a query (two threads scanned no faster than one), so under load its
scans queue the event loop and the embedder behind them; a BLAS matrix-vector product over the same vectors
releases it, and takes 0.15 ms instead of 0.6 ms at 10k tools; scoring 150 candidates' fields here spares three
filtered queries and the conversion of their hits (most of the GIL time left). The shard stays the store of record:
this copy is filled from it at open and kept in step by every upsert and delete of the adapter.

Past REDUCE_ABOVE rows the matrix no longer fits the CPU's caches and the scan is a read of main memory (100k
tools: 154 MB, 20 ms on a 2-core EPYC here, against 2 ms for 10k): the scan then reads the rows' projections on
their first REDUCED_DIMENSIONS principal components, as int8 codes (a twelfth of the rows' float32 bytes:
`int8_rows`), for OVERSAMPLING times the wanted candidates, and ranks those by their exact cosine.
docs/benchmarks-history.md ("Past 30,000 tools", under How a search runs now): what it keeps of the exact pool."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from indexer.index.base import DENSE_FIELDS, Hit, SearchFilter, centred_cosines
from indexer.index.int8_rows import MASKED, Int8Rows
from indexer.index.products import Products

REDUCE_ABOVE = 30_000
REDUCED_DIMENSIONS = 128
OVERSAMPLING = 8
FIT_SAMPLE = 20_000  # rows the principal components are computed from
# top_rows: from SAMPLE_FROM scores on, a threshold from every SAMPLE_STRIDE-th one first.
SAMPLE_FROM = 4096
SAMPLE_STRIDE = 16
SAMPLE_MARGIN = 8
SCOPES_KEPT = 64  # permission scopes whose rows (and means) are kept until the rows change
# A request whose filter admits at most this many rows scores them alone, exactly (see search_many).
SMALL_SCOPE = 1024


def top_rows(scores: np.ndarray, count: int) -> np.ndarray:
    """The indices of the `count` highest of a row of scores, in no order (what `np.argpartition` gives).

    A partition of the whole row costs more than the scan past a few thousand rows (100k rows, 1,600 wanted:
    1.5 ms a text on this 2-core machine). The `count / SAMPLE_STRIDE + SAMPLE_MARGIN`-th highest of every
    SAMPLE_STRIDE-th score is a threshold that a little more than `count` scores reach; only those are partitioned
    (6 texts at 100k: 9.3 -> 1.8 ms). Exact: when fewer than `count` reach it, the whole row is partitioned."""
    size = len(scores)
    if count >= size:
        return np.arange(size)
    if size >= SAMPLE_FROM:
        sample = scores[::SAMPLE_STRIDE]
        kth = max(0, len(sample) - 1 - (count // SAMPLE_STRIDE + SAMPLE_MARGIN))
        above = np.flatnonzero(scores >= np.partition(sample, kth)[kth])
        if len(above) >= count:
            return above[np.argpartition(-scores[above], count - 1)[:count]]
    return np.argpartition(-scores, count - 1)[:count]


class PoolMatrix:
    """Unit `tool` vectors by row, with each row's tool, server and tags for filtering."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._vectors = np.zeros((0, dimension), dtype=np.float32)
        # float32: float16 would halve their memory, but converting 150 candidates' rows back to float32 cost
        # 0.6 ms a text, seven times their dot products (numpy has no fast float16 path here).
        self._fields = np.zeros((0, len(DENSE_FIELDS), dimension), dtype=np.float32)
        self._live = np.zeros(0, dtype=bool)
        self._server_codes = np.zeros(0, dtype=np.int32)
        self._names: list[str | None] = []
        self._rows: dict[str, int] = {}
        self._free: list[int] = []
        self._servers: dict[str, int] = {}
        self._tags: list[tuple[str, ...]] = []
        self._tag_rows: dict[str, set[int]] = {}
        # The reduced scan: principal axes (dimension x REDUCED_DIMENSIONS), their centre, each row's projection
        # as int8 codes, and how many rows were live when the axes were fitted (refitted each time the catalog
        # doubles).
        self._axes: np.ndarray | None = None
        self._centre = np.zeros(dimension, dtype=np.float32)
        self._reduced = Int8Rows(REDUCED_DIMENSIONS)
        self._fitted_rows = 0
        # Each field's sum over the live rows, for the catalog's mean field vectors (`centred_cosines`); and for
        # each recent permission scope its rows and its own means (a caller's scores tell nothing of the tools it
        # may not see), dropped at every change of the rows.
        self._field_sums = np.zeros((len(DENSE_FIELDS), dimension), dtype=np.float64)
        self._scopes: dict[tuple[frozenset[str] | None, frozenset[str]], _Scope] = {}
        # The exact scan's products, in the BLAS form that is fastest here for the number of queries.
        self._products = Products()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def put(
        self,
        name: str,
        vector: Sequence[float],
        fields: Mapping[str, Sequence[float]],
        server: str,
        tags: Iterable[str],
    ) -> None:
        """Insert or replace one tool's row: its `tool` vector and its field vectors."""
        with self._lock:
            row = self._rows.get(name)
            if row is None:
                row = self._free.pop() if self._free else self._grow()
                self._rows[name] = row
                self._names[row] = name
            else:
                self._untag(row)
                self._field_sums -= self._fields[row]
            self._scopes.clear()
            self._vectors[row] = vector
            for i, field in enumerate(DENSE_FIELDS):
                values = np.asarray(fields[field], dtype=np.float32)
                norm = float(np.linalg.norm(values))
                self._fields[row, i] = values / norm if norm > 0 else values
            self._field_sums += self._fields[row]
            self._live[row] = True
            self._label(row, server, tags)
            if self._axes is not None:
                self._reduced.put(row, (self._vectors[row] - self._centre) @ self._axes)
            if len(self._rows) >= REDUCE_ABOVE and len(self._rows) >= 2 * self._fitted_rows:
                self._fit_axes()

    def relabel(self, name: str, server: str | None = None, tags: Iterable[str] | None = None) -> None:
        """Change the server or tags a row is filtered by (a payload update); unknown names are ignored."""
        with self._lock:
            row = self._rows.get(name)
            if row is None:
                return
            if tags is not None:
                self._untag(row)
                for scope in self._scopes.values():
                    scope.tag_rows = None
            self._label(row, server, tags)

    def remove(self, name: str) -> None:
        """Drop one tool's row (unknown names are ignored)."""
        with self._lock:
            row = self._rows.pop(name, None)
            if row is None:
                return
            self._untag(row)
            self._field_sums -= self._fields[row]
            self._scopes.clear()
            self._live[row] = False
            self._names[row] = None
            self._free.append(row)

    def search(self, vectors: Sequence[Sequence[float]], limit: int, where: SearchFilter) -> list[list[Hit]]:
        """Per query vector, the `limit` tools inside the filter with the highest cosine, best first. The queries
        share one matrix product: the matrix is read once (a long request and its parts: 5 texts, 1 read)."""
        return self.search_many([(vectors, where)], limit)[0]

    def search_many(
        self,
        requests: Sequence[tuple[Sequence[Sequence[float]], SearchFilter]],
        limit: int,
        part_limit: int | None = None,
    ) -> list[list[list[Hit]]]:
        """`search` for several requests (their query vectors and filters) at once, `part_limit` tools for each
        request's vectors after the first (a split request's parts; default `limit`): one matrix product for all
        their queries, so that the matrix is read once for the searches one embedding pass served together (at
        32 concurrent searches, each one's own scan cost 1.3 ms of CPU at 10k tools, most of it waiting on memory)."""
        sizes = [len(vectors) for vectors, _ in requests]
        if not sum(sizes):
            return [[] for _ in requests]
        queries = np.asarray([v for vectors, _ in requests for v in vectors], dtype=np.float32).reshape(
            sum(sizes), self.dimension
        )
        norms = np.linalg.norm(queries, axis=1, keepdims=True)
        queries = queries / np.where(norms > 0, norms, 1.0)
        out: list[list[list[Hit]]] = []
        with self._lock:
            used = len(self._names)
            masks = [self._mask(where, used) for _, where in requests]
            # A request whose filter admits few rows scores those alone: its scan costs what its own tools cost, and
            # its time says nothing of the tools it may not see (a dev allowed 2 tools searched in 1.3 ms among 5k
            # tools and 6.4 ms among 50k, the whole matrix scanned either way).
            small = [np.flatnonzero(mask) if np.count_nonzero(mask) <= SMALL_SCOPE else None for mask in masks]
            wide = np.repeat([rows is None for rows in small], sizes)
            reduced = self._axes is not None
            scores = (
                np.zeros((0, used), dtype=np.float32)
                if not wide.any()
                else self._reduced.scores(queries[wide] @ self._axes, used)
                if reduced
                else self._products(queries[wide], self._vectors[:used])
            )
            start = scanned = 0
            for size, mask, rows in zip(sizes, masks, small, strict=True):
                rows_of = queries[start : start + size]
                start += size
                inside = int(np.count_nonzero(mask)) if rows is None else len(rows)
                counts = [min(limit if i == 0 else part_limit or limit, inside) for i in range(size)]
                if inside <= 0 or not size or max(counts) <= 0:
                    scanned += size if rows is None else 0
                    out.append([[] for _ in range(size)])
                    continue
                if rows is not None:
                    own = rows_of @ self._vectors[rows].T  # few rows: quick in any form (not timed)
                    out.append([self._best(row, count, rows) for row, count in zip(own, counts, strict=True)])
                    continue
                own, scanned = scores[scanned : scanned + size], scanned + size
                if inside < used:
                    own = np.where(mask, own, MASKED if reduced else -np.inf)
                out.append(
                    self._exact_best(rows_of, own, counts, inside)
                    if reduced
                    else [self._best(row, count) for row, count in zip(own, counts, strict=True)]
                )
        return out

    def _best(self, scores: np.ndarray, count: int, rows: np.ndarray | None = None) -> list[Hit]:
        """The `count` best of a row of scores, of every row or of these `rows`."""
        best = top_rows(scores, count)
        best = best[np.argsort(-scores[best], kind="stable")]
        names = (best if rows is None else rows[best]).tolist()
        return list(map(Hit, [self._names[i] for i in names], scores[best].tolist()))

    def _exact_best(
        self, queries: np.ndarray, coarse: np.ndarray, counts: Sequence[int], inside: int
    ) -> list[list[Hit]]:
        """The best `count` rows per query (`inside` rows pass the filter, the others score MASKED in `coarse`, the
        reduced scan): OVERSAMPLING x count candidates by the reduced scan, ranked exactly."""
        out = []
        for query, row, count in zip(queries, coarse, counts, strict=True):
            if count <= 0:
                out.append([])
                continue
            rows = top_rows(row, min(count * OVERSAMPLING, inside))  # all inside the filter: wanted <= rows inside
            exact = self._vectors[rows] @ query
            best = top_rows(exact, count)
            best = best[np.argsort(-exact[best], kind="stable")]
            names = [self._names[i] for i in rows[best].tolist()]
            out.append(list(map(Hit, names, exact[best].tolist())))
        return out

    def _fit_axes(self) -> None:
        """Principal axes of the live rows (a sample of FIT_SAMPLE), and every row projected on them."""
        live = np.flatnonzero(self._live[: len(self._names)])
        sample = np.random.default_rng(0).choice(live, min(FIT_SAMPLE, len(live)), replace=False)
        centre = self._vectors[sample].mean(axis=0)
        centred = self._vectors[sample] - centre
        # The eigenvectors of the 384 x 384 covariance: 0.1 s for 20k rows where an SVD of the rows took 1.5 s,
        # and the lock is held meanwhile.
        _, vectors = np.linalg.eigh(centred.T @ centred)
        self._centre = centre.astype(np.float32)
        self._axes = np.ascontiguousarray(vectors[:, ::-1][:, :REDUCED_DIMENSIONS], dtype=np.float32)
        used = len(self._names)
        self._reduced.fit((self._vectors[:used] - self._centre) @ self._axes)
        self._fitted_rows = len(live)

    def field_scores(
        self, vector: Sequence[float], names: Iterable[str], limit: int, where: SearchFilter, centre: float = 0.0
    ) -> dict[str, list[Hit]]:
        """Per field, the `limit` named tools inside the filter with the highest cosine to `vector` (to the field
        vectors minus `centre` times the field's mean over the live rows the filter's permissions admit:
        `centred_cosines`), best first (unknown names are left out)."""
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        with self._lock:
            known = [(n, self._rows[n]) for n in names if n in self._rows]
            if known and (where.servers or where.tags or where.allowed is not None or where.denied):
                inside = self._mask(where, len(self._names))
                known = [(n, row) for n, row in known if inside[row]]
            if not known or norm == 0.0 or limit <= 0:
                return {field: [] for field in DENSE_FIELDS}
            rows = np.fromiter((row for _, row in known), dtype=np.int64, count=len(known))
            gathered = self._fields[rows]  # (candidates, fields, dimension)
            query = query / norm
            scores = gathered @ query  # (candidates, fields)
            if centre:
                mean = centre * self._scope_mean(where)  # (fields, dimension)
                doc_dot_mean = np.einsum("cfd,fd->cf", gathered, mean)
                scores = centred_cosines(scores, doc_dot_mean, mean @ query, (mean * mean).sum(axis=1))
        count = min(limit, len(known))
        out: dict[str, list[Hit]] = {}
        for i, field in enumerate(DENSE_FIELDS):
            column = scores[:, i]
            best = top_rows(column, count)
            best = best[np.argsort(-column[best], kind="stable")]
            out[field] = list(map(Hit, [known[j][0] for j in best.tolist()], column[best].tolist()))
        return out

    def centred_fields(
        self, names: Iterable[str], where: SearchFilter, centre: float = 0.0
    ) -> tuple[list[str], np.ndarray]:
        """The named tools it knows and their field vectors (tools, fields, dimension), each minus `centre` times the
        field's mean over the rows the filter's permissions admit and made unit again: a unit query's dot product
        with one is the centred cosine `field_scores` gives it (a learned query map trains on them:
        service/usage/adapter.py)."""
        with self._lock:
            known = [(n, self._rows[n]) for n in names if n in self._rows]
            rows = np.fromiter((row for _, row in known), dtype=np.int64, count=len(known))
            gathered = self._fields[rows].astype(np.float64)
            if centre and len(known):
                gathered -= centre * self._scope_mean(where).astype(np.float64)
        norms = np.linalg.norm(gathered, axis=2, keepdims=True)
        return [n for n, _ in known], (gathered / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def _scope_mean(self, where: SearchFilter) -> np.ndarray:
        """Each field's mean over the live rows the filter's permissions admit."""
        if where.permissions is None:
            return (self._field_sums / len(self._rows)).astype(np.float32)
        scope = self._scope(where.permissions)
        if scope.mean is None:
            rows = np.flatnonzero(scope.rows & self._live[: len(self._names)])
            scope.mean = (self._fields[rows].sum(axis=0, dtype=np.float64) / max(1, len(rows))).astype(np.float32)
        return scope.mean

    def _scope(self, permissions: tuple[frozenset[str] | None, frozenset[str]]) -> _Scope:
        """The rows the permissions (allowed, denied) admit, kept until the rows change."""
        scope = self._scopes.get(permissions)
        if scope is None:
            allowed, denied = permissions
            rows = np.ones(len(self._names), dtype=bool)
            if allowed is not None:
                rows[:] = False
                rows[[self._rows[n] for n in allowed - denied if n in self._rows]] = True
            else:
                rows[[self._rows[n] for n in denied if n in self._rows]] = False
            if len(self._scopes) >= SCOPES_KEPT:
                self._scopes.clear()
            scope = self._scopes[permissions] = _Scope(rows)
        return scope

    def _scope_tag_rows(self, permissions: tuple[frozenset[str] | None, frozenset[str]]) -> dict[str, list[int]]:
        """The rows of each tag inside a permission scope, gathered once per scope from its own rows: marking every
        row of a tag, hidden ones too, made a caller's search with a tag it sees slower by the number of tools it
        may not see that carry the tag (0.6 ms at 10,000), which told it they exist."""
        scope = self._scope(permissions)
        if scope.tag_rows is None:
            scope.tag_rows = {}
            for row in np.flatnonzero(scope.rows & self._live[: len(scope.rows)]).tolist():
                for tag in self._tags[row]:
                    scope.tag_rows.setdefault(tag, []).append(row)
        return scope.tag_rows

    def _mask(self, where: SearchFilter, used: int) -> np.ndarray:
        mask = self._live[:used].copy()
        if where.servers:
            codes = [self._servers[s] for s in where.servers if s in self._servers]
            mask &= np.isin(self._server_codes[:used], codes)
        if where.tags:
            tag_rows = self._tag_rows if where.permissions is None else self._scope_tag_rows(where.permissions)
            tagged = np.zeros_like(mask)
            for tag in where.tags:
                tagged[list(tag_rows.get(tag, ()))] = True
            mask &= tagged
        if where.permissions is not None:
            mask &= self._scope(where.permissions).rows[:used]
        return mask

    def _grow(self) -> int:
        row = len(self._names)
        if row == self._vectors.shape[0]:
            capacity = max(1024, 2 * row)
            for attribute in ("_vectors", "_fields", "_live", "_server_codes"):
                old = getattr(self, attribute)
                new = np.zeros((capacity, *old.shape[1:]), dtype=old.dtype)
                new[:row] = old[:row]
                setattr(self, attribute, new)
        self._names.append(None)
        self._tags.append(())
        return row

    def _label(self, row: int, server: str | None, tags: Iterable[str] | None) -> None:
        """Set what a row is filtered by (None: keep it); the row's old tags are untagged already."""
        if server is not None:
            self._server_codes[row] = self._servers.setdefault(server, len(self._servers))
        if tags is not None:
            self._tags[row] = tuple(tags)
            for tag in self._tags[row]:
                self._tag_rows.setdefault(tag, set()).add(row)

    def _untag(self, row: int) -> None:
        for tag in self._tags[row]:
            rows = self._tag_rows.get(tag)
            if rows is not None:
                rows.discard(row)
                if not rows:
                    del self._tag_rows[tag]
        self._tags[row] = ()


@dataclass
class _Scope:
    """One permission scope: a mask over every row, and each field's mean over its live rows and the rows of each
    tag once asked for."""

    rows: np.ndarray
    mean: np.ndarray | None = None
    tag_rows: dict[str, list[int]] | None = None  # once a search names a tag (`_scope_tag_rows`)
