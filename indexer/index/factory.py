"""Open the configured vector index backend, ready to use."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Any

from indexer.index.base import VectorIndex


def open_index(
    backend: str,
    *,
    path: Path | None,
    url: str | None,
    api_key: str | None,
    collection: str,
    dimension: int,
    options: Any = None,
) -> VectorIndex:
    """An opened index with its collection ensured: "edge" (shard at path) or "qdrant" (url or ':memory:').

    `options`: an object with the attributes of QdrantOptions (the index settings), used by "qdrant" only."""
    index: VectorIndex
    if backend == "edge":
        if path is None:
            raise ValueError("the edge index backend needs a path")
        from indexer.index.edge import EdgeIndex

        index = EdgeIndex(path, dimension)
    elif backend == "qdrant":
        if not url:
            raise ValueError("the qdrant index backend needs a url (or ':memory:')")
        from indexer.index.qdrant import QdrantIndex, QdrantOptions

        index = QdrantIndex(url, collection, dimension, api_key, _qdrant_options(QdrantOptions, options))
    else:
        raise ValueError(f"unknown index backend {backend!r}: expected 'edge' or 'qdrant'")
    try:
        index.ensure_collection()
    except BaseException:
        with suppress(Exception):
            index.close()
        raise
    return index


def _qdrant_options(cls: Any, options: Any) -> Any:
    """QdrantOptions from any object carrying some of its fields (the indexer knows nothing of the settings)."""
    if options is None:
        return cls()
    known = cls.__dataclass_fields__
    return cls(**{name: getattr(options, name) for name in known if hasattr(options, name)})
