"""The index steps of searches that wake together, run as one job with one scan of the pool matrix.

Under load one pass of the query micro-batcher serves many searches, and they all wake in the same turn of the
event loop. Each used to take its own index thread for its index step and read the whole `tool` matrix for its
own scan (at 32 concurrent searches over 10k tools: 1.3 ms of CPU a search, most of it waiting on memory, since
the model's weights and the other requests' work keep evicting the matrix from the cache). Here the first of them
schedules one job for every search that registers before the job starts: their scans are one matrix product
(`pooled_search_many`, as the retriever runs it), then each one's lexical query and field scores follow, on one
index thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from indexer.index.base import Hit, SearchFilter
from indexer.lexical import SparseVector

if TYPE_CHECKING:
    from service.resources import Resources
    from service.settings import SearchSettings

Texts = Sequence[tuple[list[float], SparseVector]]


class Widths(NamedTuple):
    """The hits a search asks of the index: per signal for the whole text (`candidates`) and for each part of a
    split request (`part_candidates`), and the tools the whole text's dense scan (`pool`) and each part's
    (`part_pool`) pass to exact per-field scoring."""

    candidates: int
    pool: int
    part_pool: int
    part_candidates: int


def widths_for(settings: SearchSettings, k: int) -> Widths:
    """The settings' widths, with k hits per signal and the whole text's scan at least k past k = `candidates`:
    fused candidates are the union of the signals' hits, which can all be the same `candidates` tools, so a k above
    it got fewer than k tools (k = 100 over 844 real tools: 72). Now the whole text's union holds min(k, tools
    inside the filter): its scan alone passes that many to exact field scoring, and each field returns k of them.
    Its lexical query and the parts of a split request keep the settings' widths (growing the parts' with k too
    cost a long request at k = 100 over 10k tools half as much again): up to k = pool_candidates the fields then
    score the same tools as a smaller k's, and their first `candidates` hits are that k's (`fuse`, stats_of)."""
    base = settings.candidates
    if k <= base:
        return Widths(base, settings.pool_candidates, settings.part_pool_candidates, base)
    return Widths(k, max(settings.pool_candidates, k), settings.part_pool_candidates, base)


# (index, [(texts, filter, widths) per search]) -> per search, its hits: `pooled_search_many` with those widths.
RunMany = Callable[[Any, list[tuple[Texts, SearchFilter, Widths]]], list[list[list[Hit]]]]


class IndexSteps:
    """Collects the index steps of concurrent searches and runs them together (`hits`)."""

    def __init__(self, resources: Resources, run_many: RunMany) -> None:
        self.resources = resources
        self.run_many = run_many
        self._pending: list[tuple[Texts, SearchFilter, Widths, asyncio.Future[list[list[Hit]]]]] = []
        self._jobs: set[asyncio.Task[None]] = set()
        self.jobs_run = 0  # jobs started (each served one search or more)

    async def hits(self, index: Any, texts: Texts, where: SearchFilter, widths: Widths) -> list[list[Hit]]:
        """`pooled_search` of one search's texts, run with the others that arrive in the same turn of the loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[list[Hit]]] = loop.create_future()
        self._pending.append((texts, where, widths, future))
        if len(self._pending) == 1:
            # After the callbacks already due: the other searches woken by the same embedding pass register first.
            loop.call_soon(self._start, index)
        return await future

    def _start(self, index: Any) -> None:
        batch, self._pending = self._pending, []
        job = asyncio.ensure_future(self._run(index, batch))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _run(
        self, index: Any, batch: list[tuple[Texts, SearchFilter, Widths, asyncio.Future[list[list[Hit]]]]]
    ) -> None:
        self.jobs_run += 1
        try:
            found = await self.resources.run_index(self.run_many, index, [entry[:3] for entry in batch])
        except asyncio.CancelledError:
            for *_, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every search of the job fails with it
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (*_, future), hits in zip(batch, found, strict=True):
            if not future.done():  # a search cancelled meanwhile (its client left) is skipped
                future.set_result(hits)
