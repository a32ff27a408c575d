"""The long-lived objects of a running service, built cheaply in create_app and connected in the lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from threadpoolctl import threadpool_limits

from indexer.batching import MicroBatcher
from indexer.embedding import CachedEmbedder, Embedder, create_embedder
from indexer.index.base import VectorIndex
from indexer.lexical import Bm25Encoder
from service.db.engine import create_engine_for, create_sessionmaker, private_folder, upgrade_database
from service.settings import Settings
from service.supervisor import Supervisor

if TYPE_CHECKING:
    # Types only: the domains build these objects and attach them; this module imports none of them.
    from service.catalog.events import EventHub
    from service.cluster.state import Cluster
    from service.execution.code_mode.runner import CodeMode
    from service.execution.runtime import Gateway
    from service.observability import Observability
    from service.policy.keys import KeyResolver
    from service.policy.service import PolicyState
    from service.search.log import SearchLog
    from service.search.retrieval import Boosts, Retriever
    from service.usage.learning import LearningState
    from service.usage.signal import UsageVectors

logger = logging.getLogger(__name__)


@dataclass
class Resources:
    """Everything a request may need; one instance per app."""

    settings: Settings
    embedder: CachedEmbedder
    encoder: Bm25Encoder
    engine: AsyncEngine | None = None
    sessionmaker: async_sessionmaker[AsyncSession] | None = None
    index: VectorIndex | None = None
    retriever: Retriever | None = None  # search.service.start_search
    search_log: SearchLog | None = None  # search.service.start_search_log (the app's; CLI paths write directly)
    # Writes to the index and the catalog are serialised: sync diffs must not interleave.
    index_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Query embeds go through the micro-batcher's own thread; short index calls (search, payloads, count) through
    # cpu_limiter; whole-catalog indexing through indexing_limiter, so a large registration never starves searches.
    batcher: MicroBatcher | None = None
    cpu_limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(2))
    indexing_limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))
    # Built by their domains on first use or at start-up (each module's accessor says when).
    policy: PolicyState | None = None  # policy.service.policy_state
    keys: KeyResolver | None = None  # policy.keys.key_resolver
    events: EventHub | None = None  # catalog.events.event_hub
    learning: LearningState | None = None  # usage.learning.learning_state
    boosts: Boosts | None = None  # usage.learning.start_learning: the priors the retriever applies
    usage: UsageVectors | None = None  # usage.learning.start_learning: the usage signal's vectors
    gateway: Gateway | None = None  # execution.runtime.start_gateway
    code_mode: CodeMode | None = None  # execution.code_mode.runner.code_mode
    observability: Observability | None = None  # observability.install_observability (metrics, tracer, logs)
    cluster: Cluster | None = None  # cluster.state.cluster_state: replica id, Redis bus, writer locks, follower
    progress: Callable[[int, int], None] | None = None  # the CLI's progress bar while indexing
    keyless_by_design: bool = False  # create_app's: a bench's in-process app, serving without keys unannounced
    # Every background loop runs under it: restarted with backoff on any error, shown in /readyz.
    supervisor: Supervisor = field(default_factory=Supervisor)

    def session(self) -> AsyncSession:
        """A new SQL session (the caller commits)."""
        assert self.sessionmaker is not None, "resources not started"
        return self.sessionmaker()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed query texts off the event loop: cached ones at once, the rest micro-batched."""
        vectors, _ = await self.embed_then(texts)
        return vectors

    def embed_then(
        self, texts: list[str], then: Callable[[list[list[float]]], Any] | None = None, owner: str | None = None
    ) -> Awaitable[tuple[list[list[float]], Any]]:
        """Queue the embedding now (so the caller can work while the embedder does) and await it later: the
        vectors, and the result of what comes next, `then(vectors)`, run on the embedder's thread right after the
        pass when it serves this request alone (MicroBatcher.submit_then); None when it did not run (no `then`,
        every text cached, or under load): the caller runs it then. `owner`, the caller searching: the batcher takes
        callers' texts in turn."""
        found, missing = self.embedder.lookup(texts)

        def complete(computed: list[list[float]]) -> list[list[float]]:
            every = {**found, **dict(zip(missing, computed, strict=True))}
            return [every[i] for i in range(len(texts))]

        wanted = [texts[i] for i in missing]
        pending: asyncio.Future[Any] | None = None
        if missing:
            if self.batcher is None:
                self.batcher = MicroBatcher(self.embedder.inner)
            pending = asyncio.wrap_future(
                self.batcher.submit(wanted, owner)
                if then is None
                else self.batcher.submit_then(wanted, lambda computed: then(complete(computed)), owner)
            )

        async def outcome() -> tuple[list[list[float]], Any]:
            if pending is None:
                return complete([]), None
            computed, after = (await pending, None) if then is None else await pending
            self.embedder.store(wanted, computed)
            return complete(computed), after

        return outcome()

    async def run_index(self, fn: Any, *args: Any) -> Any:
        """Run a short blocking index call (search, payloads, count, delete) off the event loop."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.cpu_limiter)

    async def run_indexing(self, fn: Any, *args: Any) -> Any:
        """Run whole-catalog indexing (embedding many tools) off the event loop, one job at a time."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.indexing_limiter)


def build_resources(settings: Settings, embedder: Embedder | None = None) -> Resources:
    """Cheap construction: nothing connects or loads here."""
    config = settings.embedding
    inner = embedder or create_embedder(
        config.backend,
        config.model,
        models_dir=settings.models_dir,
        variant=config.onnx_variant,
        batch_size=config.batch_size,
        threads=config.threads,
    )
    return Resources(
        settings=settings,
        embedder=CachedEmbedder(inner, settings.embedding.cache_size),
        encoder=Bm25Encoder(),
    )


async def start_resources(resources: Resources, index: VectorIndex | None = None) -> None:
    """Migrate and connect the database, open the index (search.service.start_search loads the retriever)."""
    from indexer.index.factory import open_index

    settings = resources.settings
    # One BLAS thread: the only large product is the search's scan of the pool matrix (0.3 ms of CPU with one
    # thread, 0.46 ms with two), and requests run side by side on the cores anyway.
    threadpool_limits(1, user_api="blas")
    await anyio.to_thread.run_sync(upgrade_database, settings.database_url, "head", settings.db.timeout_seconds)
    resources.engine = create_engine_for(settings.database_url, settings.db.echo, settings.db.timeout_seconds)
    resources.sessionmaker = create_sessionmaker(resources.engine)
    if index is None:
        private_folder(settings.data_dir)
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


async def close_resources(resources: Resources) -> None:
    """Release the query embedder's thread, the index and the database."""
    if resources.batcher is not None:
        await anyio.to_thread.run_sync(resources.batcher.close)
        resources.batcher = None
    if resources.index is not None:
        await anyio.to_thread.run_sync(resources.index.close)
        resources.index = None
    if resources.engine is not None:
        await resources.engine.dispose()
        resources.engine = None
