"""Sync tools into the vector index: diff by content hash, batch-embed what changed, upsert, delete."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from indexer.documents import ToolDocument, build_document, content_hash
from indexer.embedding import Embedder
from indexer.index.base import DENSE_FIELDS, IndexPoint, VectorIndex
from indexer.lexical import Bm25Encoder
from indexer.tools import ToolDefinition

Progress = Callable[[int, int], None]  # (done, total)


@dataclass
class SyncReport:
    """What a sync did."""

    embedded: list[str] = field(default_factory=list)  # tools whose vectors had to be computed
    upserted: int = 0  # points written (embedded or from stored vectors)
    unchanged: int = 0
    deleted: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "embedded": len(self.embedded),
            "upserted": self.upserted,
            "unchanged": self.unchanged,
            "deleted": len(self.deleted),
            "seconds": round(self.seconds, 3),
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
) -> dict[str, DenseVectors]:
    """content hash -> the dense vector of each field; only tools whose hash is not in `stored` embed."""
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
    return out


def build_points(
    tools: Sequence[ToolDefinition],
    embedder: Embedder,
    encoder: Bm25Encoder,
    stored: Mapping[str, DenseVectors] | None = None,
) -> list[IndexPoint]:
    """Embed the dense fields of the tools in one batch (unless stored by content hash) and encode their
    lexical vectors."""
    documents = [build_document(tool) for tool in tools]
    vectors = dense_vectors(tools, embedder, stored)
    return [
        IndexPoint(
            doc.qualified_name, vectors[doc.content_hash], encoder.encode_document(doc.lexical), tool_payload(tool, doc)
        )
        for tool, doc in zip(tools, documents, strict=True)
    ]


def index_tools(
    index: VectorIndex,
    embedder: Embedder,
    encoder: Bm25Encoder,
    tools: Sequence[ToolDefinition],
    *,
    batch_size: int = 128,
    progress: Progress | None = None,
    known_hashes: dict[str, str] | None = None,
    stored: Mapping[str, DenseVectors] | None = None,
) -> SyncReport:
    """Upsert the tools whose content hash differs from the index; unchanged tools, and tools whose vectors are
    in `stored` (content hash -> field vectors), embed nothing."""
    started = time.perf_counter()
    indexed = index.content_hashes() if known_hashes is None else known_hashes
    changed = [t for t in tools if indexed.get(t.qualified_name) != content_hash(t)]
    report = SyncReport(unchanged=len(tools) - len(changed))
    for offset in range(0, len(changed), batch_size):
        batch = changed[offset : offset + batch_size]
        index.upsert(build_points(batch, embedder, encoder, stored))
        report.embedded.extend(t.qualified_name for t in batch if stored is None or content_hash(t) not in stored)
        report.upserted += len(batch)
        if progress:
            progress(len(report.embedded), len(changed))
    report.seconds = time.perf_counter() - started
    return report


def sync_catalog(
    index: VectorIndex,
    embedder: Embedder,
    encoder: Bm25Encoder,
    tools: Sequence[ToolDefinition],
    *,
    batch_size: int = 128,
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
