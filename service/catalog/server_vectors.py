"""Server-aware scoring: one document per described server (indexer/servers.py), embedded when its text changes
and kept in memory as one matrix; a search blends each candidate's fused score with its server's similarity.

Servers are few (a few thousand at most), so the matrix is searched exactly and rebuilt on change. Vectors are
stored in `tool_vectors` under the document's hash (one vector a row), so a restart or another replica
following the change loads them instead of embedding. Refreshed by the catalog after each change it commits,
and by the catalog follower on other replicas (service/cluster/runtime.py)."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.servers import server_document, server_hash, server_info
from service.cluster.vectors import embedder_id
from service.db.among import among
from service.db.models import Server, Tool, ToolVectors, active

if TYPE_CHECKING:
    from service.resources import Resources


class ServerVectors:
    """The vector of each server's document, as rows of one matrix for a query's similarities."""

    def __init__(self) -> None:
        self._digests: dict[str, str] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._rows: dict[str, int] = {}
        self._matrix: np.ndarray | None = None
        self.lock = asyncio.Lock()  # one refresh at a time: two would embed the same documents

    def __len__(self) -> int:
        return len(self._vectors)

    def servers(self) -> list[str]:
        return sorted(self._vectors)

    def digest(self, server: str) -> str | None:
        return self._digests.get(server)

    def put(self, server: str, digest: str, vector: Any) -> None:
        self._digests[server] = digest
        self._vectors[server] = np.asarray(vector, dtype=np.float32)
        self._matrix = None

    def drop(self, server: str) -> None:
        if self._vectors.pop(server, None) is not None:
            self._digests.pop(server, None)
            self._matrix = None

    def similarities(self, query: Any, servers: Collection[str]) -> dict[str, float]:
        """Cosine (the vectors are unit length) of the request with each of these servers that has a vector."""
        if self._matrix is None:
            order = sorted(self._vectors)
            self._rows = {s: i for i, s in enumerate(order)}
            self._matrix = np.stack([self._vectors[s] for s in order]) if order else np.zeros((0, 1), np.float32)
        rows = [(s, self._rows[s]) for s in servers if s in self._rows]
        if len(rows) < 2:  # one server (or none) among the candidates: nothing to tell them apart by
            return {}
        sims = (self._matrix @ np.asarray(query, dtype=np.float32)).tolist()  # all rows: cheaper than a gather
        return {s: sims[r] for s, r in rows}


async def _documents(session: AsyncSession, server_ids: list[str] | None) -> dict[str, str]:
    """server id -> document text, for the servers (of `server_ids`, or all) with active tools that describe
    themselves (a title, a description or instructions).

    A server that says no more than its name gets no document: its id is in its tools' own fields already, and
    such documents cost Seal-Tools (category ids as servers) R@5 (docs/quality-history.md)."""
    servers = select(Server.id, Server.info)
    if server_ids is not None:
        servers = servers.where(among(Server.id, server_ids))
    described = {
        server: info for server, raw in await session.execute(servers) if set(info := server_info(raw)) - {"name"}
    }
    if not described:  # most catalogs of tool definitions: no tool needs reading
        return {}
    tools = select(Tool.server_id).where(active(), among(Tool.server_id, described)).distinct()
    listing = set((await session.scalars(tools)).all())
    return {server: server_document(server, info) for server, info in described.items() if server in listing}


async def _load(session: AsyncSession, digests: Iterable[str], model: str) -> dict[str, list[float]]:
    wanted = sorted(set(digests))
    if not wanted:
        return {}
    rows = await session.execute(
        select(ToolVectors.content_hash, ToolVectors.vectors).where(
            ToolVectors.model == model, among(ToolVectors.content_hash, wanted)
        )
    )
    out = {}
    for digest, blob in rows:
        values = array("f")
        values.frombytes(blob)
        out[digest] = values.tolist()
    return out


async def _save(session: AsyncSession, vectors: Mapping[str, list[float]], model: str) -> None:
    rows = [
        {"content_hash": d, "model": model, "dimension": len(v), "vectors": array("f", v).tobytes()}
        for d, v in vectors.items()
    ]
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    for start in range(0, len(rows), 500):
        statement = insert(ToolVectors).values(rows[start : start + 500])
        await session.execute(statement.on_conflict_do_nothing(index_elements=["content_hash", "model"]))
    await session.commit()


async def refresh_servers(resources: Resources, server_ids: Iterable[str] | None = None) -> int:
    """Bring the server vectors of these servers (all when None) in line with the catalog: embed the documents
    that changed (or load their stored vectors), drop servers without active tools. Returns how many changed."""
    retriever = resources.retriever
    if retriever is None:
        return 0
    vectors, wanted_ids = retriever.servers, None if server_ids is None else sorted(set(server_ids))
    if wanted_ids == []:
        return 0
    model = embedder_id(resources.embedder)
    async with vectors.lock:
        async with resources.session() as session:
            documents = await _documents(session, wanted_ids)
            gone = set(vectors.servers() if wanted_ids is None else wanted_ids) - set(documents)
            digests = {s: server_hash(doc) for s, doc in documents.items()}
            changed = {s: d for s, d in digests.items() if vectors.digest(s) != d}
            stored = await _load(session, changed.values(), model)
            missing = sorted(s for s, d in changed.items() if d not in stored)
            if missing:
                # Catalog texts bypass the query cache: they would only evict the queries it is there for.
                embedded = await resources.run_indexing(resources.embedder.inner.embed, [documents[s] for s in missing])
                new = {changed[s]: list(v) for s, v in zip(missing, embedded, strict=True)}
                await _save(session, new, model)
                stored.update(new)
        for server in gone:
            vectors.drop(server)
        for server, digest in changed.items():
            vectors.put(server, digest, stored[digest])
    return len(changed) + len(gone)
