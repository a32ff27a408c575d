"""Vector index adapters behind one protocol."""

from indexer.index.base import DENSE_FIELDS, Hit, IndexPoint, SearchFilter, SignalQuery, VectorIndex

__all__ = ["DENSE_FIELDS", "Hit", "IndexPoint", "SearchFilter", "SignalQuery", "VectorIndex"]
