"""Open the configured vector index backend, ready to use."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

from indexer.index.base import VectorIndex


def open_index(
    backend: str,
    *,
    path: Path | None,
    url: str | None,
    api_key: str | None,
    collection: str,
    dimension: int,
) -> VectorIndex:
    """An opened index with its collection ensured: "edge" (shard at path) or "qdrant" (url or ':memory:')."""
    index: VectorIndex
    if backend == "edge":
        if path is None:
            raise ValueError("the edge index backend needs a path")
        from indexer.index.edge import EdgeIndex

        index = EdgeIndex(path, dimension)
    elif backend == "qdrant":
        if not url:
            raise ValueError("the qdrant index backend needs a url (or ':memory:')")
        from indexer.index.qdrant import QdrantIndex

        index = QdrantIndex(url, collection, dimension, api_key)
    else:
        raise ValueError(f"unknown index backend {backend!r}: expected 'edge' or 'qdrant'")
    try:
        index.ensure_collection()
    except BaseException:
        with suppress(Exception):
            index.close()
        raise
    return index
