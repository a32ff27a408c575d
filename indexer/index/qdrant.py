"""The client index: a collection on a Qdrant server, or in qdrant-client's in-process ':memory:' mode.

On a server: HNSW search (no brute force), one query per text with a prefetch per signal fused by the server
(`fused_search`), keyword payload indexes ensured at every start, transient failures retried with backoff,
and the collection created with the configured shards, replication and on-disk vectors. `:memory:` is
qdrant-client's local mode, exact by construction; it runs the same queries (its tests cover both paths)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np
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
    unit_rows,
)

logger = logging.getLogger(__name__)

MEMORY = ":memory:"
_UPSERT_BATCH = 256
_SCROLL_PAGE = 1000
MEAN_SAMPLE = 2000  # points the mean field vectors of centred scoring are taken from
MEAN_TTL_SECONDS = 300.0
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
        self._means: tuple[np.ndarray | None, float] = (None, 0.0)  # `_field_means` and when it was taken
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
                sparse_vectors_config={
                    LEXICAL_FIELD: models.SparseVectorParams(
                        modifier=models.Modifier.IDF, index=models.SparseIndexParams(on_disk=options.on_disk or None)
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
        if POOL_FIELD not in sizes:
            # An older layout: the catalog of record refills the new collection at start (reconcile_index) from
            # its stored vectors, so nothing is embedded again.
            logger.warning(
                "collection %s has no %s vectors (an older layout): recreating it", self.collection, POOL_FIELD
            )
            self._call("delete_collection", lambda: self._client.delete_collection(self.collection))
            self._create_collection()

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
        self._means = (None, 0.0)
        for start in range(0, len(structs), _UPSERT_BATCH):
            batch = structs[start : start + _UPSERT_BATCH]
            self._call("upsert", lambda b=batch: self._client.upsert(self.collection, b, wait=True))

    def delete(self, qualified_names: Sequence[str]) -> None:
        """Remove points; unknown names are ignored."""
        if not qualified_names:
            return
        self._means = (None, 0.0)
        selector = models.PointIdsList(points=[point_id(n) for n in qualified_names])
        self._call("delete", lambda: self._client.delete(self.collection, points_selector=selector, wait=True))

    def content_hashes(self) -> dict[str, str]:
        """qualified name -> content hash ("" when absent) of every stored point."""
        hashes: dict[str, str] = {}
        offset: Any = None
        while True:
            records, offset = self._call(
                "scroll",
                lambda o=offset: self._client.scroll(
                    self.collection,
                    limit=_SCROLL_PAGE,
                    offset=o,
                    with_payload=["qualified_name", "content_hash"],
                    with_vectors=False,
                ),
            )
            for record in records:
                payload = record.payload or {}
                hashes[payload["qualified_name"]] = payload.get("content_hash", "")
            if offset is None:
                return hashes

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
        means = self._field_means() if any(_centred(q) for q in queries) else None
        mean_of = dict(zip(DENSE_FIELDS, means, strict=True)) if means is not None else {}
        centred = [i for i, q in enumerate(queries) if mean_of and _centred(q)]
        asked = [
            models.QueryRequest(
                query=_query(q),
                using=q.signal,
                filter=flt if q.within is None else _within(q.within, flt),
                limit=len(q.within) if i in centred else q.limit,  # type: ignore[arg-type]
                with_payload=["qualified_name"],  # full payloads are fetched for the winners only
                params=None if q.signal == LEXICAL_FIELD else self._search_params(q.limit),
            )
            for i, q in enumerate(queries)
        ]
        requests = asked + [asked[i].model_copy(update={"query": mean_of[queries[i].signal].tolist()}) for i in centred]
        responses = self._call("search", lambda: self._client.query_batch_points(self.collection, requests=requests))
        hits = [[hit_of(p.score, p.payload) for p in response.points] for response in responses]
        for i, mean_hits in zip(centred, hits[len(asked) :], strict=True):
            hits[i] = centre_hits(hits[i], mean_hits, queries[i], mean_of[queries[i].signal])
        return hits[: len(asked)]

    def _field_means(self) -> np.ndarray | None:
        """(fields, dimension): each field's mean vector over a sample of MEAN_SAMPLE points (uuid5 ids make the
        first ones by id a random sample), kept MEAN_TTL_SECONDS (other replicas write too) or until this
        adapter writes; None for an empty collection."""
        cached, at = self._means
        if at and time.monotonic() - at < MEAN_TTL_SECONDS:
            return cached
        records, _ = self._call(
            "scroll",
            lambda: self._client.scroll(
                self.collection, limit=MEAN_SAMPLE, with_payload=False, with_vectors=list(DENSE_FIELDS)
            ),
        )
        vectors = [r.vector for r in records if isinstance(r.vector, dict)]
        means = (
            np.stack([unit_rows([v[f] for v in vectors]).mean(axis=0) for f in DENSE_FIELDS]).astype(np.float32)
            if vectors
            else None
        )
        self._means = (means, time.monotonic())
        return means

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
        requests = []
        for group in groups:
            signals = [q for q in group if weights.get(q.signal, 0.0) > 0]
            prefetch = [
                models.Prefetch(
                    query=_query(q),
                    using=q.signal,
                    filter=flt,
                    limit=q.limit,
                    params=None if q.signal == LEXICAL_FIELD else self._search_params(q.limit),
                )
                for q in signals
            ]
            fusion: models.Query = (
                models.RrfQuery(rrf=models.Rrf(k=RRF_K, weights=[weights[q.signal] for q in signals]))
                if self.options.fusion == "rrf"
                else models.FusionQuery(fusion=models.Fusion.DBSF)
            )
            requests.append(
                models.QueryRequest(prefetch=prefetch, query=fusion, limit=limit, with_payload=["qualified_name"])
            )
        responses = self._call("search", lambda: self._client.query_batch_points(self.collection, requests=requests))
        return [[hit_of(p.score, p.payload) for p in response.points] for response in responses]

    def count(self) -> int:
        """Number of points."""
        return self._call("count", lambda: self._client.count(self.collection, exact=True).count)

    def close(self) -> None:
        """Release the client (a ':memory:' collection is gone afterwards)."""
        with _backend("close"):
            self._client.close()


def _query(query: SignalQuery) -> list[float] | models.SparseVector:
    if query.signal == LEXICAL_FIELD:
        if query.sparse is None:
            raise ValueError("a lexical SignalQuery needs a sparse vector")
        return models.SparseVector(indices=query.sparse.indices, values=query.sparse.values)
    if query.dense is None:
        raise ValueError(f"a {query.signal} SignalQuery needs a dense vector")
    return query.dense


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
