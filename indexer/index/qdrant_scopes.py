"""The statistics of a caller's scope on a Qdrant collection: BM25's IDF (`TermCounts`) and the dense fields'
centring means, counted over the tools the caller's permissions admit, as the embedded index counts them, so
that tools it may not see, added or removed, move none of its scores.

The collection is shared: other replicas write to it too. This adapter's own writes reach the statistics at once;
the others' when they are read again from the collection, at most TTL_SECONDS later. The term counts are read
again on a thread of their own while every search keeps the stale ones."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from time import monotonic
from typing import Any

import numpy as np
from qdrant_client import models

from indexer.index.base import DENSE_FIELDS, LEXICAL_FIELD, IndexBackendError, SearchFilter, unit_rows
from indexer.index.term_counts import TermCounts

logger = logging.getLogger(__name__)

TTL_SECONDS = 300.0
MEAN_SAMPLE = 2000  # points a scope's mean field vectors are taken from
SCOPES_KEPT = 16  # permission scopes whose centring means are kept

Permissions = tuple[frozenset[str] | None, frozenset[str]] | None
# One tool's lexical document: its qualified name and its term indices (None: the tool was deleted).
Document = tuple[str, Sequence[int] | None]
FieldVectors = Mapping[str, Sequence[float]]
# The collection's points (with these payload fields and vectors, inside a filter), a page at a time, by id.
ReadRecords = Callable[[Any, Any, SearchFilter | None], Iterator[models.Record]]


class ScopeStatistics:
    """Term counts of the whole collection (IDF in any scope) and each recent scope's mean field vectors, read
    from the collection with `records`."""

    def __init__(self, records: ReadRecords, ttl: float = TTL_SECONDS) -> None:
        self._records = records
        self._ttl = ttl
        self._terms: TermCounts | None = None  # None until first read
        self._terms_at = 0.0
        self._writes_while_reading: list[Document] | None = None  # replayed on the counts being read
        self._means: OrderedDict[Permissions, tuple[np.ndarray | None, float]] = OrderedDict()
        self._writes = 0  # bumped by every write: means sampled across one are not kept
        self._reading = threading.Lock()  # one read of the term counts at a time
        self.refresher: threading.Thread | None = None  # the latest read made in the background
        self._lock = threading.Lock()

    def weights(self, terms: Sequence[int], where: SearchFilter) -> tuple[list[int], list[float]]:
        """The query terms that some tool in the caller's scope holds, and their IDF there (`TermCounts`)."""
        return self._term_counts().weights(terms, where)

    def holders(self, terms: Sequence[int], where: SearchFilter) -> list[int]:
        """How many tools of the caller's scope hold each term (`TermCounts`)."""
        return self._term_counts().holders(terms, where)

    def written(self, documents: Iterable[Document]) -> None:
        """This adapter upserted (terms) or deleted (None) these tools in the collection."""
        with self._lock:
            self._writes += 1
            self._means.clear()
            for document in documents:
                if self._terms is not None:
                    _apply(self._terms, document)
                if self._writes_while_reading is not None:
                    self._writes_while_reading.append(document)

    def forget(self) -> None:
        """The collection was recreated: read everything again."""
        with self._lock:
            self._writes += 1
            self._means.clear()
            self._terms, self._terms_at = None, 0.0

    def _term_counts(self) -> TermCounts:
        counts = self._terms
        if counts is None:  # the first read is waited for
            with self._reading:
                return self._terms if self._terms is not None else self._read_terms()
        if self._stale(self._terms_at) and self._reading.acquire(blocking=False):
            # Read again on a thread of its own: a scroll of the whole collection (0.6 s at 10k tools) must not
            # stall the search that found the counts stale; every search keeps the stale ones meanwhile.
            self.refresher = threading.Thread(target=self._read_again, name="qdrant-term-counts", daemon=True)
            self.refresher.start()
        return counts

    def _read_again(self) -> None:
        try:
            self._read_terms()
        except IndexBackendError as exc:
            logger.warning("qdrant index: term counts kept stale, reading them again failed: %s", exc)
        finally:
            self._reading.release()

    def _read_terms(self) -> TermCounts:
        with self._lock:
            self._writes_while_reading = []
        try:
            fresh = TermCounts()
            for name, terms in self._documents():
                fresh.put(name, terms)
        except BaseException:
            with self._lock:
                self._writes_while_reading = None
            raise
        with self._lock:
            # This adapter's writes during the scroll may or may not be in what it read: applied again, they are.
            for document in self._writes_while_reading or ():
                _apply(fresh, document)
            self._writes_while_reading = None
            self._terms, self._terms_at = fresh, monotonic()
        return fresh

    def _documents(self) -> Iterator[tuple[str, Sequence[int]]]:
        """Every point's qualified name and lexical term indices."""
        for record in self._records(["qualified_name"], [LEXICAL_FIELD], None):
            lexical = record.vector.get(LEXICAL_FIELD) if isinstance(record.vector, dict) else None
            if record.payload:
                yield record.payload["qualified_name"], lexical.indices if lexical is not None else ()

    def field_means(self, where: SearchFilter) -> np.ndarray | None:
        """(fields, dimension): each field's mean vector over a sample of the tools the caller's permissions
        admit (the servers and tags it picks hide nothing from it); None when there are none."""
        key = where.permissions
        with self._lock:
            cached = self._means.get(key)
            if cached is not None and not self._stale(cached[1]):
                self._means.move_to_end(key)
                return cached[0]
            writes = self._writes
        means = _mean_field_vectors(self._sample(SearchFilter(allowed=where.allowed, denied=where.denied)))
        with self._lock:
            if writes == self._writes:  # no write since the sample was read: it is current
                self._means[key] = (means, monotonic())
                self._means.move_to_end(key)
                while len(self._means) > SCOPES_KEPT:
                    self._means.popitem(last=False)
        return means

    def _sample(self, where: SearchFilter) -> list[FieldVectors]:
        """The field vectors of the first MEAN_SAMPLE points by id inside the filter (uuid5 ids: a random sample)."""
        records = islice(self._records(False, list(DENSE_FIELDS), where), MEAN_SAMPLE)
        return [r.vector for r in records if isinstance(r.vector, dict)]  # type: ignore[misc]

    def _stale(self, at: float) -> bool:
        return monotonic() - at >= self._ttl


def _mean_field_vectors(vectors: Sequence[FieldVectors]) -> np.ndarray | None:
    """(fields, dimension) float32: each field's mean unit vector; None for no vectors."""
    if not vectors:
        return None
    return np.stack([unit_rows([v[f] for v in vectors]).mean(axis=0) for f in DENSE_FIELDS]).astype(np.float32)


def _apply(counts: TermCounts, document: Document) -> None:
    name, terms = document
    if terms is None:
        counts.remove(name)
    else:
        counts.put(name, terms)
