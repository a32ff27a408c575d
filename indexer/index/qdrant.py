"""The client index: a collection on a Qdrant server, or in qdrant-client's in-process ':memory:' mode.

On a server: HNSW search (no brute force), one query per text with a prefetch per signal fused by the server
(`fused_search`), keyword payload indexes ensured at every start, transient failures retried with backoff,
and the collection created with the configured shards, replication and on-disk vectors; BM25's IDF and the
centring means are the caller's scope's (`qdrant_scopes.py`). `:memory:` is qdrant-client's local mode, exact by
construction; it runs the same queries (its tests cover both paths)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from indexer.index.base import (
    DENSE_FIELDS,
    INDEXED_VECTORS,
    KEYWORD_FIELDS,
    LEXICAL_FIELD,
    POOL_FIELD,
    Hit,
    IndexBackendError,
    IndexPoint,
    SearchFilter,
    SignalQuery,
    centre_hits,
    filter_terms,
    hit_of,
    point_id,
    pool_vector,
)
from indexer.index.qdrant_scopes import ScopeStatistics

logger = logging.getLogger(__name__)

MEMORY = ":memory:"
_UPSERT_BATCH = 256
_SCROLL_PAGE = 1000
RRF_K = 60
T = TypeVar("T")
Fusion = Literal["rrf", "dbsf"]


@dataclass(frozen=True)
class QdrantOptions:
    """Server-only settings: collection layout (used when the collection is created), query effort, retries."""

    shards: int = 1
    replication_factor: int = 1
    write_consistency_factor: int = 1
    on_disk: bool = False
    hnsw_ef: int = 128
    retries: int = 3
    retry_backoff_seconds: float = 0.2
    timeout_seconds: float = 10.0
    fusion: Fusion = "rrf"


def _transient(exc: Exception) -> bool:
    """Worth retrying: the server was unreachable, overloaded or restarting."""
    if isinstance(exc, ResponseHandlingException):
        return True
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code is not None and (exc.status_code >= 500 or exc.status_code == 429)
    return isinstance(exc, ConnectionError | TimeoutError)


@contextmanager
def _backend(action: str) -> Iterator[None]:
    """Translate qdrant-client failures (HTTP, gRPC, local-mode ValueError...) into IndexBackendError."""
    try:
        yield
    except IndexBackendError:
        raise
    except Exception as exc:
        raise IndexBackendError(f"qdrant index: {action} failed: {exc}") from exc


class QdrantIndex:
    """VectorIndex on one Qdrant collection; `location` is a server URL or ':memory:'."""

    def __init__(
        self,
        location: str,
        collection: str = "toolscout_tools",
        dimension: int = 384,
        api_key: str | None = None,
        options: QdrantOptions | None = None,
    ) -> None:
        self.collection = collection
        self.dimension = dimension
        self.options = options or QdrantOptions()
        self._local = location == MEMORY  # local mode: always exact, no payload indexes, nothing to retry
        # The IDF and centring means of each caller's scope (not the collection's: least knowledge).
        self.scopes = ScopeStatistics(self._records)
        with _backend(f"connecting to {location}"):
            self._client = (
                QdrantClient(MEMORY)
                if self._local
                else QdrantClient(url=location, api_key=api_key, timeout=int(max(1, self.options.timeout_seconds)))
            )

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        """Run one client call; transient server failures are retried with exponential backoff."""
        attempts = 1 if self._local else 1 + max(0, self.options.retries)
        delay = self.options.retry_backoff_seconds
        with _backend(action):
            for attempt in range(1, attempts + 1):
                try:
                    return fn()
                except Exception as exc:
                    if attempt == attempts or not _transient(exc):
                        raise
                    logger.warning(
                        "qdrant %s failed (%s); retry %d/%d in %.2f s", action, exc, attempt, attempts - 1, delay
                    )
                    time.sleep(delay)
                    delay *= 2
        raise AssertionError("unreachable")

    def _search_params(self, limit: int) -> models.SearchParams | None:
        # HNSW with a beam at least as wide as the candidates asked for; local mode is exact anyway.
        return None if self._local else models.SearchParams(hnsw_ef=max(self.options.hnsw_ef, limit))

    def ensure_collection(self) -> None:
        """Create the collection if missing (else check its dimension); ensure the keyword payload indexes."""
        if self._call("collection_exists", lambda: self._client.collection_exists(self.collection)):
            self._check_dimension()
        else:
            self._create_collection()
        if not self._local:
            # Always, not only on a new collection: an index added in a later version reaches old collections.
            schema = self._call("get_collection", lambda: self._client.get_collection(self.collection)).payload_schema
            for field in KEYWORD_FIELDS:
                if field not in schema:
                    self._call(
                        "create_payload_index",
                        lambda f=field: self._client.create_payload_index(
                            self.collection, f, models.PayloadSchemaType.KEYWORD, wait=True
                        ),
                    )

    def _create_collection(self) -> None:
        options = self.options
        layout: dict[str, Any] = (
            {}
            if self._local
            else {
                "shard_number": options.shards,
                "replication_factor": options.replication_factor,
                "write_consistency_factor": options.write_consistency_factor,
            }
        )
        self._call(
            "create_collection",
            lambda: self._client.create_collection(
                self.collection,
                vectors_config={
                    name: models.VectorParams(
                        size=self.dimension, distance=models.Distance.COSINE, on_disk=options.on_disk or None
                    )
                    for name in INDEXED_VECTORS
                },
                # No modifier: each lexical query carries its terms' IDF in the caller's scope (`_weighted`).
                sparse_vectors_config={
                    LEXICAL_FIELD: models.SparseVectorParams(
                        index=models.SparseIndexParams(on_disk=options.on_disk or None)
                    )
                },
                **layout,
            ),
        )

    def _check_dimension(self) -> None:
        info = self._call("get_collection", lambda: self._client.get_collection(self.collection))
        vectors = info.config.params.vectors
        sizes = {name: params.size for name, params in vectors.items()} if isinstance(vectors, dict) else {}
        if any(sizes.get(name) != self.dimension for name in DENSE_FIELDS):
            raise IndexBackendError(
                f"collection {self.collection} has dense vectors {sizes}, expected size {self.dimension}"
            )
        lexical = (info.config.params.sparse_vectors or {}).get(LEXICAL_FIELD)
        if POOL_FIELD not in sizes or (lexical is not None and lexical.modifier == models.Modifier.IDF):
            # An older layout (no `tool` vectors, or the collection's own IDF on the lexical vectors): the catalog
            # of record refills the new collection at start (reconcile_index) from its stored vectors.
            logger.warning("collection %s has an older layout: recreating it", self.collection)
            self._call("delete_collection", lambda: self._client.delete_collection(self.collection))
            self._create_collection()
            self.scopes.forget()

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or replace points (vectors and payload together), in batches."""
        structs = [
            models.PointStruct(
                id=point_id(p.qualified_name),
                vector={
                    **p.vectors,
                    POOL_FIELD: pool_vector(p.vectors),
                    LEXICAL_FIELD: models.SparseVector(indices=p.lexical.indices, values=p.lexical.values),
                },
                payload={**p.payload, "qualified_name": p.qualified_name},
            )
            for p in points
        ]
        for start in range(0, len(structs), _UPSERT_BATCH):
            batch = structs[start : start + _UPSERT_BATCH]
            self._call("upsert", lambda b=batch: self._client.upsert(self.collection, b, wait=True))
        self.scopes.written((p.qualified_name, p.lexical.indices) for p in points)

    def delete(self, qualified_names: Sequence[str]) -> None:
        """Remove points; unknown names are ignored."""
        if not qualified_names:
            return
        selector = models.PointIdsList(points=[point_id(n) for n in qualified_names])
        self._call("delete", lambda: self._client.delete(self.collection, points_selector=selector, wait=True))
        self.scopes.written((name, None) for name in qualified_names)

    def content_hashes(self) -> dict[str, str]:
        """qualified name -> content hash ("" when absent) of every stored point."""
        records = self._records(["qualified_name", "content_hash"], with_vectors=False)
        return {r.payload["qualified_name"]: r.payload.get("content_hash", "") for r in records if r.payload}

    def _records(
        self, with_payload: bool | list[str], with_vectors: bool | list[str], where: SearchFilter | None = None
    ) -> Iterator[models.Record]:
        """Every point of the collection (inside the filter), a page at a time, by id."""
        flt = None if where is None else _filter(where)
        offset: Any = None
        while True:
            records, offset = self._call(
                "scroll",
                lambda o=offset: self._client.scroll(
                    self.collection,
                    scroll_filter=flt,
                    limit=_SCROLL_PAGE,
                    offset=o,
                    with_payload=with_payload,
                    with_vectors=with_vectors,
                ),
            )
            yield from records
            if offset is None:
                return

    def payloads(self, qualified_names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """qualified name -> payload of the named points that exist."""
        if not qualified_names:
            return {}
        ids = [point_id(n) for n in qualified_names]
        records = self._call(
            "retrieve", lambda: self._client.retrieve(self.collection, ids=ids, with_payload=True, with_vectors=False)
        )
        return {r.payload["qualified_name"]: dict(r.payload) for r in records if r.payload}

    def set_payload(self, qualified_name: str, values: dict[str, Any]) -> None:
        """Merge values into one point's payload; an unknown name is ignored."""
        only = models.Filter(must=[models.HasIdCondition(has_id=[point_id(qualified_name)])])
        self._call(
            "set_payload", lambda: self._client.set_payload(self.collection, payload=values, points=only, wait=True)
        )

    def search(self, queries: Sequence[SignalQuery], where: SearchFilter) -> list[list[Hit]]:
        """All signal queries in one query_batch_points call, each restricted by the filter; best first. A
        centred field query scores every named tool, and the field's mean vector scores them too (d·m)."""
        if where.matches_nothing or not queries:
            return [[] for _ in queries]
        flt = _filter(where)
        # A lexical query none of whose terms a tool in the caller's scope holds finds nothing: it is not run.
        vectors = {i: v for i, q in enumerate(queries) if (v := self._weighted(q, where)) is not None}
        asked = [queries[i] for i in vectors]
        means = self.scopes.field_means(where) if any(_centred(q) for q in asked) else None
        mean_of = dict(zip(DENSE_FIELDS, means, strict=True)) if means is not None else {}
        centred = [k for k, q in enumerate(asked) if mean_of and _centred(q)]
        requests = [
            models.QueryRequest(
                query=vector,
                using=q.signal,
                filter=flt if q.within is None else _within(q.within, flt),
                limit=len(q.within) if k in centred else q.limit,  # type: ignore[arg-type]
                with_payload=["qualified_name"],  # full payloads are fetched for the winners only
                params=None if q.signal == LEXICAL_FIELD else self._search_params(q.limit),
            )
            for k, (q, vector) in enumerate(zip(asked, vectors.values(), strict=True))
        ]
        requests += [requests[k].model_copy(update={"query": mean_of[asked[k].signal].tolist()}) for k in centred]
        hits = self._query_batch(requests)
        for k, mean_hits in zip(centred, hits[len(asked) :], strict=True):
            hits[k] = centre_hits(hits[k], mean_hits, asked[k], mean_of[asked[k].signal])
        found = dict(zip(vectors, hits[: len(asked)], strict=True))
        return [found.get(i, []) for i in range(len(queries))]

    def _query_batch(self, requests: list[models.QueryRequest]) -> list[list[Hit]]:
        if not requests:
            return []
        responses = self._call("search", lambda: self._client.query_batch_points(self.collection, requests=requests))
        return [[hit_of(p.score, p.payload) for p in response.points] for response in responses]

    def _weighted(self, query: SignalQuery, where: SearchFilter) -> list[float] | models.SparseVector | None:
        """The collection's query for a signal query; a lexical one weighted by its terms' IDF in the caller's
        scope (None when no tool there holds any of its terms: nothing to find)."""
        if query.signal != LEXICAL_FIELD:
            return query.dense_vector()
        terms, weights = self.scopes.weights(query.lexical_terms(), where)
        return models.SparseVector(indices=terms, values=weights) if terms else None

    def fused_search(
        self,
        groups: Sequence[Sequence[SignalQuery]],
        weights: Mapping[str, float],
        limit: int,
        where: SearchFilter,
    ) -> list[list[Hit]]:
        """One query per group (the signal queries of one text): each signal prefetched inside the filter and
        fused by the server (weighted reciprocal rank fusion, or distribution-based score fusion); best first."""
        if where.matches_nothing or not groups:
            return [[] for _ in groups]
        flt = _filter(where)
        requests = {}
        for g, group in enumerate(groups):
            # Weighted signals only, and a lexical one only when a tool in the caller's scope holds one of its terms.
            signals = [(q, v) for q in group if weights.get(q.signal, 0.0) > 0 and (v := self._weighted(q, where))]
            prefetch = [
                models.Prefetch(
                    query=vector,
                    using=q.signal,
                    filter=flt,
                    limit=q.limit,
                    params=None if q.signal == LEXICAL_FIELD else self._search_params(q.limit),
                )
                for q, vector in signals
            ]
            fusion: models.Query = (
                models.RrfQuery(rrf=models.Rrf(k=RRF_K, weights=[weights[q.signal] for q, _ in signals]))
                if self.options.fusion == "rrf"
                else models.FusionQuery(fusion=models.Fusion.DBSF)
            )
            if prefetch:
                requests[g] = models.QueryRequest(
                    prefetch=prefetch, query=fusion, limit=limit, with_payload=["qualified_name"]
                )
        found = dict(zip(requests, self._query_batch(list(requests.values())), strict=True))
        return [found.get(g, []) for g in range(len(groups))]

    def term_holders(self, terms: Sequence[int], where: SearchFilter) -> list[int]:
        return self.scopes.holders(terms, where)

    def count(self) -> int:
        """Number of points."""
        return self._call("count", lambda: self._client.count(self.collection, exact=True).count)

    def close(self) -> None:
        """Release the client (a ':memory:' collection is gone afterwards)."""
        with _backend("close"):
            self._client.close()


def _centred(query: SignalQuery) -> bool:
    return bool(query.centre) and query.within is not None and query.signal in DENSE_FIELDS


def _within(names: frozenset[str], flt: models.Filter | None) -> models.Filter:
    """The filter of a query over named tools only (and the caller's filter, when there is one)."""
    only = models.HasIdCondition(has_id=[point_id(n) for n in names])
    return models.Filter(must=[only] if flt is None else [only, flt])


def _filter(where: SearchFilter) -> models.Filter | None:
    must, must_not = filter_terms(where)
    if not must and not must_not:
        return None

    def any_of(field: str, values: list[str]) -> models.Condition:
        return models.FieldCondition(key=field, match=models.MatchAny(any=values))

    return models.Filter(must=[any_of(*t) for t in must] or None, must_not=[any_of(*t) for t in must_not] or None)
