"""Dense tool vectors stored beside the catalog, per content hash and embedder: computed once for the cluster.

A registration embeds its new tools before it commits and stores their vectors in the same transaction, so
another replica following the change, a new replica or a restart loads them instead of embedding."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.documents import content_hash
from indexer.embedding import Embedder
from indexer.index.base import DENSE_FIELDS
from indexer.pipeline import DenseVectors, dense_vectors
from indexer.tools import ToolDefinition
from service.db.models import ToolVectors

if TYPE_CHECKING:
    from service.resources import Resources

_LOAD_BATCH = 500


def embedder_id(embedder: Embedder) -> str:
    """Which embedder computed a vector: its engine, model, variant (ONNX int8 or fp32) and dimension. Engines
    give slightly different vectors for one text, so replicas share vectors only with the same embedder."""
    inner = getattr(embedder, "inner", embedder)
    parts = (type(inner).__name__, getattr(inner, "model_name", ""), getattr(inner, "variant", ""))
    return ":".join([*(str(p) for p in parts if p), str(embedder.dimension)])[:128]


def pack(vectors: DenseVectors) -> bytes:
    """The field vectors as float32 little-endian, fields in DENSE_FIELDS order."""
    values = array("f")
    for field in DENSE_FIELDS:
        values.extend(vectors[field])
    return values.tobytes()


def unpack(blob: bytes, dimension: int) -> DenseVectors:
    """The inverse of pack."""
    values = array("f")
    values.frombytes(blob)
    return {field: values[i * dimension : (i + 1) * dimension].tolist() for i, field in enumerate(DENSE_FIELDS)}


async def load_vectors(session: AsyncSession, hashes: Iterable[str], model: str) -> dict[str, DenseVectors]:
    """content hash -> field vectors of the hashes stored for this embedder."""
    wanted = sorted(set(hashes))
    out: dict[str, DenseVectors] = {}
    for start in range(0, len(wanted), _LOAD_BATCH):
        chunk = wanted[start : start + _LOAD_BATCH]
        rows = await session.execute(
            select(ToolVectors.content_hash, ToolVectors.dimension, ToolVectors.vectors).where(
                ToolVectors.model == model, ToolVectors.content_hash.in_(chunk)
            )
        )
        for digest, dimension, blob in rows:
            out[digest] = unpack(blob, dimension)
    return out


async def save_vectors(session: AsyncSession, vectors: dict[str, DenseVectors], model: str) -> None:
    """Store vectors; a hash another replica stored meanwhile is left as it is."""
    if not vectors:
        return
    rows = [
        {"content_hash": digest, "model": model, "dimension": len(v[DENSE_FIELDS[0]]), "vectors": pack(v)}
        for digest, v in vectors.items()
    ]
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    for start in range(0, len(rows), _LOAD_BATCH):
        statement = insert(ToolVectors).values(rows[start : start + _LOAD_BATCH])
        await session.execute(statement.on_conflict_do_nothing(index_elements=["content_hash", "model"]))


async def vectors_for(
    resources: Resources, tools: Sequence[ToolDefinition]
) -> tuple[dict[str, DenseVectors], dict[str, DenseVectors]]:
    """Field vectors of these tools: (all of them, the ones embedded now). The caller stores the new ones with
    `save_vectors` in its write transaction; embedding happens before it, holding no database lock."""
    if not tools:
        return {}, {}
    async with resources.session() as session:
        stored = await load_vectors(session, (content_hash(t) for t in tools), embedder_id(resources.embedder))
    missing = [t for t in tools if content_hash(t) not in stored]
    new: dict[str, DenseVectors] = {}
    if missing:
        # Catalog texts bypass the query cache: they would only evict the queries it is there for.
        new, _ = await resources.run_indexing(dense_vectors, missing, resources.embedder.inner)
    return {**stored, **new}, new
