"""The embedded index: a qdrant-edge shard in a local directory, searched in-process with exact dense search.

A shard directory may be open in one EdgeShard at a time (its WAL is locked): a second open, from this or
another process, fails with IndexBackendError."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import qdrant_edge as qe

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
    filter_terms,
    point_id,
    pool_vector,
)
from indexer.index.pool_matrix import PoolMatrix
from indexer.index.term_counts import TermCounts

logger = logging.getLogger(__name__)

_SCROLL_PAGE = 1000
# Payloads of recent winners kept in memory (a few MB): a search whose winners are all here skips a thread hop and
# a shard read (0.4 ms of a 10k-tool search on this machine).
PAYLOAD_CACHE = 4096
_EXACT = qe.SearchParams(exact=True)
# IDF comes with each lexical query, counted in the caller's scope (indexer/index/term_counts.py), not from the shard.
_NO_MODIFIER = getattr(qe.Modifier, "None")


@contextmanager
def _backend(action: str) -> Iterator[None]:
    """Translate qdrant-edge failures (bare Exception) into IndexBackendError; TypeError is a caller bug."""
    try:
        yield
    except TypeError:  # raised while converting arguments, e.g. a payload value that is not JSON
        raise
    except Exception as exc:
        raise IndexBackendError(f"edge index: {action} failed: {exc}") from exc


class EdgeIndex:
    """VectorIndex on an embedded qdrant-edge shard at `path` (loaded if present, created otherwise)."""

    def __init__(self, path: Path, dimension: int = 384) -> None:
        self.path = Path(path)
        self.dimension = dimension
        config = qe.EdgeConfig(
            vectors={
                name: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine) for name in INDEXED_VECTORS
            },
            sparse_vectors={LEXICAL_FIELD: qe.EdgeSparseVectorParams(modifier=_NO_MODIFIER)},
            # One plain segment is scanned by one thread; the default pool (one thread per CPU, 8 here) woke
            # every thread for each query and cost ~3 ms of CPU per search for nothing.
            max_search_threads=1,
        )
        _drop_older_layout(self.path)
        with _backend(f"opening {self.path}"):
            if (self.path / "edge_config.json").exists():
                self._shard = qe.EdgeShard.load(str(self.path), config)  # also checks the dimension
            else:
                self._shard = qe.EdgeShard.create(str(self.path), config)
        self._hashes: dict[str, str] = {}
        self.pool = PoolMatrix(dimension)
        self.terms = TermCounts()
        self._load_memory()
        # point id (as an int: UUID objects hash in Python) -> qualified name: searches return bare ids, because
        # converting even a one-field payload per hit costs more than the search itself.
        self._names: dict[int, str] = {UUID(point_id(n)).int: n for n in self._hashes}
        self._payload_cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._payload_writes = 0  # bumped by every write: a read that raced one does not fill the cache
        self._cache_lock = threading.Lock()

    def ensure_collection(self) -> None:
        """The shard exists since __init__; add the missing keyword payload indexes."""
        with _backend("creating payload indexes"):
            existing = self._shard.info().payload_schema
            for field in KEYWORD_FIELDS:
                if field not in existing:
                    self._shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or replace points (vectors and payload together)."""
        if not points:
            return
        pools = [pool_vector(p.vectors) for p in points]
        edge_points = [
            qe.Point(point_id(p.qualified_name), _vectors(p, pool), {**p.payload, "qualified_name": p.qualified_name})
            for p, pool in zip(points, pools, strict=True)
        ]
        with _backend("upsert"):
            self._shard.update(qe.UpdateOperation.upsert_points(edge_points))
        self._forget_payloads(p.qualified_name for p in points)
        for p, pool in zip(points, pools, strict=True):
            self._names[UUID(point_id(p.qualified_name)).int] = p.qualified_name
            self.pool.put(
                p.qualified_name, pool, p.vectors, str(p.payload.get("server", "")), p.payload.get("tags") or ()
            )
            self.terms.put(p.qualified_name, p.lexical.indices)
        self._hashes.update((p.qualified_name, str(p.payload.get("content_hash", ""))) for p in points)

    def delete(self, qualified_names: Sequence[str]) -> None:
        """Remove points; unknown names are ignored."""
        if not qualified_names:
            return
        with _backend("delete"):
            self._shard.update(qe.UpdateOperation.delete_points([point_id(n) for n in qualified_names]))
        self._forget_payloads(qualified_names)
        for name in qualified_names:
            self.pool.remove(name)
            self.terms.remove(name)
            self._names.pop(UUID(point_id(name)).int, None)
            self._hashes.pop(name, None)

    def content_hashes(self) -> dict[str, str]:
        """qualified name -> content hash ("" when absent) of every stored point (held in memory: this process is
        the shard's only writer, and a registration asks for them every time)."""
        return dict(self._hashes)

    def _load_memory(self) -> None:
        """Fill the content hashes, the pool matrix and the term counts from the shard (1.2 s for 10k tools). The
        field vectors are read and the `tool` vector derived from them, as at upsert."""
        offset: Any = None
        fields = ["qualified_name", "content_hash", "server", "tags"]
        with _backend("scroll"):
            while True:
                request = qe.ScrollRequest(
                    offset=offset, limit=_SCROLL_PAGE, with_payload=fields, with_vector=[*DENSE_FIELDS, LEXICAL_FIELD]
                )
                records, offset = self._shard.scroll(request)
                for record in records:
                    payload = record.payload or {}
                    name = payload["qualified_name"]
                    self._hashes[name] = payload.get("content_hash", "")
                    vectors = record.vector or {}
                    if all(f in vectors for f in DENSE_FIELDS):
                        self.pool.put(
                            name,
                            pool_vector(vectors),
                            vectors,
                            str(payload.get("server", "")),
                            payload.get("tags") or (),
                        )
                    lexical = vectors.get(LEXICAL_FIELD)
                    self.terms.put(name, lexical.indices if lexical is not None else ())
                if offset is None:
                    return

    def payloads(self, qualified_names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """qualified name -> payload of the named points that exist (from memory when recently read)."""
        found = self.cached_payloads(qualified_names)
        missing = [n for n in qualified_names if n not in found]
        if not missing:
            return found
        with self._cache_lock:
            writes = self._payload_writes
        with _backend("retrieve"):
            records = self._shard.retrieve([point_id(n) for n in missing], with_payload=True, with_vector=False)
        read = {r.payload["qualified_name"]: r.payload for r in records if r.payload}
        with self._cache_lock:
            if writes == self._payload_writes:  # no write since the read began: what was read is current
                self._payload_cache.update(read)
                while len(self._payload_cache) > PAYLOAD_CACHE:
                    self._payload_cache.popitem(last=False)
        found.update((name, dict(payload)) for name, payload in read.items())
        return found

    def cached_payloads(self, qualified_names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The payloads of the named points held in memory (copies); cheap enough for the event loop."""
        out: dict[str, dict[str, Any]] = {}
        with self._cache_lock:
            for name in qualified_names:
                payload = self._payload_cache.get(name)
                if payload is not None:
                    self._payload_cache.move_to_end(name)
                    out[name] = dict(payload)
        return out

    def _forget_payloads(self, qualified_names: Iterable[str]) -> None:
        with self._cache_lock:
            self._payload_writes += 1
            for name in qualified_names:
                self._payload_cache.pop(name, None)

    def set_payload(self, qualified_name: str, values: dict[str, Any]) -> None:
        """Merge values into one point's payload; an unknown name is ignored."""
        only = qe.Filter(must=[qe.HasIdCondition({point_id(qualified_name)})])
        with _backend("set_payload"):
            self._shard.update(qe.UpdateOperation.set_payload_by_filter(only, values))
        self._forget_payloads([qualified_name])
        if "content_hash" in values and qualified_name in self._hashes:
            self._hashes[qualified_name] = str(values["content_hash"])
        if "server" in values or "tags" in values:
            server, tags = values.get("server"), values.get("tags")
            self.pool.relabel(qualified_name, None if server is None else str(server), tags)

    def search(self, queries: Sequence[SignalQuery], where: SearchFilter) -> list[list[Hit]]:
        """Every signal query restricted by the filter, best first: scans of the `tool` vector from the pool
        matrix (no GIL held), the others in one query_batch of the shard."""
        if where.matches_nothing or not queries:
            return [[] for _ in queries]
        if any(q.signal == POOL_FIELD and q.dense is None for q in queries):
            raise ValueError(f"a {POOL_FIELD} SignalQuery needs a dense vector")
        answers: list[list[Hit] | None] = [None] * len(queries)
        scans = [i for i, q in enumerate(queries) if q.signal == POOL_FIELD and q.within is None]
        for limit in {queries[i].limit for i in scans}:
            same = [i for i in scans if queries[i].limit == limit]
            found = self.pool.search([queries[i].dense for i in same], limit, where)  # type: ignore[misc]
            for i, hits in zip(same, found, strict=True):
                answers[i] = hits
        # A text's field queries over its candidates share one gather of their field vectors.
        rescored: dict[tuple[frozenset[str], int, int, float], dict[str, list[Hit]]] = {}
        for i, q in enumerate(queries):
            if q.within is not None and q.signal in DENSE_FIELDS and q.dense is not None:
                key = (q.within, id(q.dense), q.limit, q.centre)
                if key not in rescored:
                    rescored[key] = self.pool.field_scores(q.dense, q.within, q.limit, where, q.centre)
                answers[i] = rescored[key][q.signal]
        rest = [q for q, answer in zip(queries, answers, strict=True) if answer is None]
        batch = iter(self._query_batch(rest, where) if rest else [])
        return [answer if answer is not None else next(batch) for answer in answers]

    def scan_many(
        self,
        requests: Sequence[tuple[Sequence[Sequence[float]], SearchFilter]],
        limit: int,
        part_limit: int | None = None,
    ) -> list[list[list[Hit]]]:
        """Per request (its texts' vectors and its filter), per text, the `limit` best tools by their `tool`
        vector (`part_limit` for the texts after the first): the scans of several searches as one matrix product
        (`pooled_search_many`)."""
        return self.pool.search_many(requests, limit, part_limit)

    def _query_batch(self, queries: Sequence[SignalQuery], where: SearchFilter) -> list[list[Hit]]:
        flt = _filter(where)
        within: dict[frozenset[str], qe.Filter] = {}  # the fields of one text share their candidates
        for q in queries:
            if q.within is not None and q.within not in within:
                within[q.within] = self._within(q.within, flt)
        asked = [(q, self._weighted(q, where)) for q in queries]
        requests = [
            qe.QueryRequest(
                limit=q.limit,
                query=query,
                filter=flt if q.within is None else within[q.within],
                with_payload=False,  # full payloads are fetched for the winners only
                params=None if q.signal == LEXICAL_FIELD else _EXACT,  # the sparse index is exact already
            )
            for q, query in asked
            if query is not None
        ]
        with _backend("search"):
            results = iter(self._shard.query_batch(qe.QueryBatchRequest(requests)) if requests else [])
        return [self._hits(next(results)) if query is not None else [] for _, query in asked]

    def _weighted(self, query: SignalQuery, where: SearchFilter) -> qe.Query | None:
        """The shard's query for a signal query; a lexical one weighted by its terms' IDF in the caller's scope
        (None when no tool there holds any of its terms: nothing to find)."""
        if query.signal != LEXICAL_FIELD:
            return qe.Query.Nearest(query.dense_vector(), using=query.signal)
        terms, weights = self.terms.weights(query.lexical_terms(), where)
        return qe.Query.Nearest(qe.SparseVector(terms, weights), using=LEXICAL_FIELD) if terms else None

    def _within(self, names: frozenset[str], flt: qe.Filter | None) -> qe.Filter:
        """The filter of a query over named tools only (and the caller's filter, when there is one)."""
        only = qe.HasIdCondition({point_id(n) for n in names})
        return qe.Filter(must=[only] if flt is None else [only, flt])  # a Filter nests as a condition

    def _hits(self, points: list[Any]) -> list[Hit]:
        hits = []
        for p in points:
            name = self._names.get(p.id.int)
            if name is not None:
                hits.append(Hit(name, p.score))
        return hits

    def term_holders(self, terms: Sequence[int], where: SearchFilter) -> list[int]:
        return self.terms.holders(terms, where)

    def count(self) -> int:
        """Number of points."""
        with _backend("count"):
            return self._shard.count(qe.CountRequest(exact=True))

    def close(self) -> None:
        """Flush and release the shard (and its lock); the index is unusable afterwards."""
        with _backend("close"):
            self._shard.flush()
            self._shard.close()


def _drop_older_layout(path: Path) -> None:
    """A shard of an older layout (written before the `tool` vector existed, or with the shard's own IDF on the
    lexical vectors) is removed: the catalog of record refills the new one at start (reconcile_index), from its
    stored vectors, so nothing is embedded again."""
    config = path / "edge_config.json"
    if not config.is_file():
        return
    try:
        layout = json.loads(config.read_text())
        vectors = layout.get("vectors", {})
        modifier = layout.get("sparse_vectors", {}).get(LEXICAL_FIELD, {}).get("modifier")
    except (OSError, ValueError, AttributeError):
        return  # opening reports it
    missing = [name for name in INDEXED_VECTORS if name not in vectors]
    if missing or modifier == "idf":
        why = f"no {missing} vectors" if missing else "the shard's IDF on its lexical vectors"
        logger.warning("index %s has %s (an older layout): rebuilding it from the catalog", path, why)
        shutil.rmtree(path)


def _vectors(point: IndexPoint, pool: list[float]) -> dict[str, Any]:
    sparse = qe.SparseVector(point.lexical.indices, point.lexical.values)
    return {**point.vectors, POOL_FIELD: pool, LEXICAL_FIELD: sparse}


def _filter(where: SearchFilter) -> qe.Filter | None:
    must, must_not = filter_terms(where)
    if not must and not must_not:
        return None

    def any_of(field: str, values: list[str]) -> qe.FieldCondition:
        return qe.FieldCondition(field, match=qe.MatchAny(values))

    return qe.Filter(must=[any_of(*t) for t in must] or None, must_not=[any_of(*t) for t in must_not] or None)
