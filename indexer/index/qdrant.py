"""The client index: a collection on a Qdrant server, or in qdrant-client's in-process ':memory:' mode."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from qdrant_client import QdrantClient, models

from indexer.index.base import (
    DENSE_FIELDS,
    KEYWORD_FIELDS,
    LEXICAL_FIELD,
    Hit,
    IndexBackendError,
    IndexPoint,
    SearchFilter,
    SignalQuery,
    filter_terms,
    hit_of,
    point_id,
)

MEMORY = ":memory:"
_UPSERT_BATCH = 256
_SCROLL_PAGE = 1000


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
    ) -> None:
        self.collection = collection
        self.dimension = dimension
        self._local = location == MEMORY  # local mode: always brute force, no payload indexes
        self._params = None if self._local else models.SearchParams(exact=True)
        with _backend(f"connecting to {location}"):
            self._client = (
                QdrantClient(MEMORY) if self._local else QdrantClient(url=location, api_key=api_key)
            )

    def ensure_collection(self) -> None:
        """Create the collection and its keyword payload indexes if missing; check the dimension otherwise."""
        with _backend(f"ensuring collection {self.collection}"):
            if self._client.collection_exists(self.collection):
                self._check_dimension()
                return
            self._client.create_collection(
                self.collection,
                vectors_config={
                    name: models.VectorParams(size=self.dimension, distance=models.Distance.COSINE)
                    for name in DENSE_FIELDS
                },
                sparse_vectors_config={
                    LEXICAL_FIELD: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
            )
            if not self._local:
                for field in KEYWORD_FIELDS:
                    self._client.create_payload_index(
                        self.collection, field, models.PayloadSchemaType.KEYWORD
                    )

    def _check_dimension(self) -> None:
        vectors = self._client.get_collection(self.collection).config.params.vectors
        sizes = {name: params.size for name, params in vectors.items()} if isinstance(vectors, dict) else {}
        if any(sizes.get(name) != self.dimension for name in DENSE_FIELDS):
            raise IndexBackendError(
                f"collection {self.collection} has dense vectors {sizes}, expected size {self.dimension}"
            )

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or replace points (vectors and payload together), in batches."""
        structs = [
            models.PointStruct(
                id=point_id(p.qualified_name),
                vector={
                    **p.vectors,
                    LEXICAL_FIELD: models.SparseVector(indices=p.lexical.indices, values=p.lexical.values),
                },
                payload={**p.payload, "qualified_name": p.qualified_name},
            )
            for p in points
        ]
        with _backend("upsert"):
            for start in range(0, len(structs), _UPSERT_BATCH):
                self._client.upsert(self.collection, structs[start : start + _UPSERT_BATCH], wait=True)

    def delete(self, qualified_names: Sequence[str]) -> None:
        """Remove points; unknown names are ignored."""
        if not qualified_names:
            return
        selector = models.PointIdsList(points=[point_id(n) for n in qualified_names])
        with _backend("delete"):
            self._client.delete(self.collection, points_selector=selector, wait=True)

    def content_hashes(self) -> dict[str, str]:
        """qualified name -> content hash ("" when absent) of every stored point."""
        hashes: dict[str, str] = {}
        offset: Any = None
        with _backend("scroll"):
            while True:
                records, offset = self._client.scroll(
                    self.collection,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=["qualified_name", "content_hash"],
                    with_vectors=False,
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
        with _backend("retrieve"):
            records = self._client.retrieve(self.collection, ids=ids, with_payload=True, with_vectors=False)
        return {r.payload["qualified_name"]: dict(r.payload) for r in records if r.payload}

    def set_payload(self, qualified_name: str, values: dict[str, Any]) -> None:
        """Merge values into one point's payload; an unknown name is ignored."""
        only = models.Filter(must=[models.HasIdCondition(has_id=[point_id(qualified_name)])])
        with _backend("set_payload"):
            self._client.set_payload(self.collection, payload=values, points=only, wait=True)

    def search(self, queries: Sequence[SignalQuery], where: SearchFilter) -> list[list[Hit]]:
        """All signal queries in one query_batch_points call, each restricted by the filter; best first."""
        if where.matches_nothing or not queries:
            return [[] for _ in queries]
        flt = _filter(where)
        requests = [
            models.QueryRequest(
                query=_query(q),
                using=q.signal,
                filter=flt,
                limit=q.limit,
                with_payload=["qualified_name"],  # full payloads are fetched for the winners only
                params=None if q.signal == LEXICAL_FIELD else self._params,
            )
            for q in queries
        ]
        with _backend("search"):
            responses = self._client.query_batch_points(self.collection, requests=requests)
        return [[hit_of(p.score, p.payload) for p in response.points] for response in responses]

    def count(self) -> int:
        """Number of points."""
        with _backend("count"):
            return self._client.count(self.collection, exact=True).count

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


def _filter(where: SearchFilter) -> models.Filter | None:
    must, must_not = filter_terms(where)
    if not must and not must_not:
        return None

    def any_of(field: str, values: list[str]) -> models.Condition:
        return models.FieldCondition(key=field, match=models.MatchAny(any=values))

    return models.Filter(must=[any_of(*t) for t in must] or None, must_not=[any_of(*t) for t in must_not] or None)
