"""A text -> vector cache for offline tuning, so experiments never embed the same text twice.

Usage: python bench/embed_cache.py CACHE.pkl TEXTS.txt (one text a line; embeds the ones not cached yet)"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexer.embedding import SentenceTransformerEmbedder


class EmbeddingCache:
    """Vectors of texts, embedded once with the bundled model and kept in a pickle."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vectors: dict[str, np.ndarray] = pickle.loads(path.read_bytes()) if path.is_file() else {}
        self._embedder: SentenceTransformerEmbedder | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of the texts (rows), embedding and saving only the missing ones."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            if self._embedder is None:
                self._embedder = SentenceTransformerEmbedder(threads=2)
            for start in range(0, len(missing), 2048):
                chunk = missing[start : start + 2048]
                for text, vector in zip(chunk, self._embedder.embed(chunk), strict=True):
                    self.vectors[text] = np.asarray(vector, dtype=np.float32)
                self.save()
                print(f"embedded {start + len(chunk)}/{len(missing)}", flush=True)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self.vectors[t] for t in texts])

    def save(self) -> None:
        self.path.write_bytes(pickle.dumps(self.vectors))


if __name__ == "__main__":
    cache = EmbeddingCache(Path(sys.argv[1]))
    cache.embed([line for line in Path(sys.argv[2]).read_text().splitlines() if line.strip()])
