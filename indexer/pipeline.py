"""Sync tools into the vector index: diff by content hash, batch-embed what changed, upsert, delete."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from indexer.documents import ToolDocument, build_document, content_hash
from indexer.embedding import Embedder
from indexer.index.base import DENSE_FIELDS, IndexPoint, VectorIndex
from indexer.lexical import Bm25Encoder
from indexer.tools import ToolDefinition

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total)
# Tools embedded together: their texts are deduplicated and sorted by token length across the whole chunk,
# so batches carry little padding, while the vectors of one chunk stay a few tens of MB.
EMBED_CHUNK = 2048


@dataclass
class SyncReport:
    """What a sync did."""

    embedded: list[str] = field(default_factory=list)  # tools whose vectors had to be computed
    upserted: list[str] = field(default_factory=list)  # tools written (embedded or from stored vectors)
    unchanged: int = 0
    deleted: list[str] = field(default_factory=list)
    texts: int = 0  # distinct texts embedded
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "embedded": len(self.embedded),
            "upserted": len(self.upserted),
            "unchanged": self.unchanged,
            "deleted": len(self.deleted),
            "texts": self.texts,
            "seconds": round(self.seconds, 3),
            "tools_per_s": round(len(self.embedded) / self.seconds, 1) if self.seconds else 0.0,
        }


def tool_payload(tool: ToolDefinition, document: ToolDocument) -> dict[str, object]:
    """What the index stores next to the vectors: enough to answer a search without SQL."""
    return {
        "qualified_name": document.qualified_name,
        "server": tool.server,
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "annotations": tool.annotations,
        "tags": list(tool.tags),
        "content_hash": document.content_hash,
    }


DenseVectors = dict[str, list[float]]  # field -> vector


def dense_vectors(
    tools: Sequence[ToolDefinition], embedder: Embedder, stored: Mapping[str, DenseVectors] | None = None
) -> tuple[dict[str, DenseVectors], int]:
    """content hash -> the dense vector of each field, and the number of distinct texts embedded: only tools
    whose hash is not in `stored` embed, in one call (each distinct text once)."""
    stored = stored or {}
    out: dict[str, DenseVectors] = {}
    missing: list[ToolDocument] = []
    for tool in tools:
        digest = content_hash(tool)
        if digest in stored:
            out[digest] = stored[digest]
        elif digest not in out:
            out[digest] = {}
            missing.append(build_document(tool))
    texts = [getattr(doc, fname) for doc in missing for fname in DENSE_FIELDS]
    # Fields often repeat (a tool without parameters indexes its name twice): embed each text once.
    unique = list(dict.fromkeys(texts))
    embedded = dict(zip(unique, embedder.embed(unique), strict=True)) if unique else {}
    for doc in missing:
        out[doc.content_hash] = {fname: embedded[getattr(doc, fname)] for fname in DENSE_FIELDS}
    return out, len(unique)


def build_points(
    tools: Sequence[ToolDefinition],
    embedder: Embedder,
    encoder: Bm25Encoder,
    stored: Mapping[str, DenseVectors] | None = None,
) -> tuple[list[IndexPoint], int]:
    """Embed the dense fields of the tools in one call (unless stored by content hash) and encode their lexical
    vectors; returns the points and the number of distinct texts embedded."""
    documents = [build_document(tool) for tool in tools]
    vectors, texts = dense_vectors(tools, embedder, stored)
    points = [
        IndexPoint(
            doc.qualified_name, vectors[doc.content_hash], encoder.encode_document(doc.lexical), tool_payload(tool, doc)
        )
        for tool, doc in zip(tools, documents, strict=True)
    ]
    return points, texts


def index_tools(
    index: VectorIndex,
    embedder: Embedder,
    encoder: Bm25Encoder,
    tools: Sequence[ToolDefinition],
    *,
    batch_size: int = 512,
    progress: Progress | None = None,
    known_hashes: dict[str, str] | None = None,
    stored: Mapping[str, DenseVectors] | None = None,
) -> SyncReport:
    """Upsert the tools whose content hash differs from the index; unchanged tools, and tools whose vectors are
    in `stored` (content hash -> field vectors), embed nothing.

    Texts are embedded EMBED_CHUNK tools at a time (the embedder sorts them by length); points are
    upserted `batch_size` at a time."""
    started = time.perf_counter()
    indexed = index.content_hashes() if known_hashes is None else known_hashes
    changed = [t for t in tools if indexed.get(t.qualified_name) != content_hash(t)]
    report = SyncReport(unchanged=len(tools) - len(changed))
    for offset in range(0, len(changed), EMBED_CHUNK):
        chunk = changed[offset : offset + EMBED_CHUNK]
        points, texts = build_points(chunk, embedder, encoder, stored)
        report.texts += texts
        for start in range(0, len(points), batch_size):
            index.upsert(points[start : start + batch_size])
        report.embedded.extend(t.qualified_name for t in chunk if stored is None or content_hash(t) not in stored)
        report.upserted.extend(t.qualified_name for t in chunk)
        if progress:
            progress(len(report.upserted), len(changed))
    report.seconds = time.perf_counter() - started
    if changed:
        logger.info(
            "indexed %d tools (%d embedded, %d distinct texts) in %.1f s: %.0f tools/s",
            len(changed),
            len(report.embedded),
            report.texts,
            report.seconds,
            len(changed) / max(report.seconds, 1e-9),
        )
    return report


def sync_catalog(
    index: VectorIndex,
    embedder: Embedder,
    encoder: Bm25Encoder,
    tools: Sequence[ToolDefinition],
    *,
    batch_size: int = 512,
    progress: Progress | None = None,
    stored: Mapping[str, DenseVectors] | None = None,
    keep: Callable[[list[str]], set[str]] | None = None,
) -> SyncReport:
    """Make the index hold exactly these tools: index the changed ones, delete the ones not listed.

    `keep(stale)` names the stale points that must stay after all (a newer catalog version holds them)."""
    started = time.perf_counter()
    hashes = index.content_hashes()
    report = index_tools(
        index, embedder, encoder, tools, batch_size=batch_size, progress=progress, known_hashes=hashes, stored=stored
    )
    wanted = {t.qualified_name for t in tools}
    stale = [name for name in hashes if name not in wanted]
    if stale and keep is not None:
        kept = keep(stale)
        stale = [name for name in stale if name not in kept]
    if stale:
        index.delete(stale)
    report.deleted = stale
    report.seconds = time.perf_counter() - started
    return report
