"""The long-lived objects of a running service, built cheaply in create_app and connected in the lifespan."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from indexer.embedding import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from indexer.index.base import VectorIndex
from indexer.lexical import Bm25Encoder
from service.cluster.state import Cluster, build_cluster
from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database
from service.settings import Settings

if TYPE_CHECKING:
    from service.retrieval import Retriever

logger = logging.getLogger(__name__)


@dataclass
class Resources:
    """Everything a request may need; one instance per app."""

    settings: Settings
    embedder: CachedEmbedder
    encoder: Bm25Encoder
    cluster: Cluster
    engine: AsyncEngine | None = None
    sessionmaker: async_sessionmaker[AsyncSession] | None = None
    index: VectorIndex | None = None
    retriever: Retriever | None = None
    # Writes to the index and the catalog are serialised: sync diffs must not interleave.
    index_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # CPU-bound embedding runs in worker threads, bounded so queries don't starve each other.
    cpu_limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(2))
    extras: dict[str, Any] = field(default_factory=dict)

    def session(self) -> AsyncSession:
        """A new SQL session (the caller commits)."""
        assert self.sessionmaker is not None, "resources not started"
        return self.sessionmaker()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed off the event loop."""
        return await anyio.to_thread.run_sync(self.embedder.embed, texts, limiter=self.cpu_limiter)

    async def run_index(self, fn: Any, *args: Any) -> Any:
        """Run a blocking index call off the event loop."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.cpu_limiter)


def build_resources(settings: Settings, embedder: Embedder | None = None) -> Resources:
    """Cheap construction: nothing connects or loads here."""
    inner = embedder or SentenceTransformerEmbedder(
        settings.embedding.model, settings.embedding.batch_size, settings.embedding.threads
    )
    return Resources(
        settings=settings,
        embedder=CachedEmbedder(inner, settings.embedding.cache_size),
        encoder=Bm25Encoder(),
        cluster=build_cluster(settings),
    )


async def start_resources(resources: Resources, index: VectorIndex | None = None) -> None:
    """Migrate and connect the database, open the index, load the catalog into the retriever."""
    from indexer.index.factory import open_index
    from service.cluster.changes import last_seq
    from service.retrieval import Retriever

    settings = resources.settings
    await anyio.to_thread.run_sync(upgrade_database, settings.database_url)
    resources.engine = create_engine_for(settings.database_url, settings.db.echo)
    resources.sessionmaker = create_sessionmaker(resources.engine)
    if index is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        index = await anyio.to_thread.run_sync(
            lambda: open_index(
                settings.index.backend,
                path=settings.index_path,
                url=settings.index.url,
                api_key=settings.index.api_key,
                collection=settings.index.collection,
                dimension=resources.embedder.dimension,
                options=settings.index,
            )
        )
    resources.index = index
    resources.retriever = Retriever(resources)
    async with resources.session() as session:
        # Read before the names: a change committed while they load is followed again (harmlessly).
        resources.cluster.start_seq = await last_seq(session)
        await resources.retriever.load_names(session)


async def close_resources(resources: Resources) -> None:
    """Release the index and the database."""
    if resources.index is not None:
        await anyio.to_thread.run_sync(resources.index.close)
        resources.index = None
    if resources.engine is not None:
        await resources.engine.dispose()
        resources.engine = None
