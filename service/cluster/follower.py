"""Follow the catalog's change sequence so this replica serves what any replica registered or removed.

Woken at once by a `catalog` event on the bus, and by a poll otherwise (faster while Redis is down). Changes
are applied by state, not replayed: the rows of the named tools are read again and the name directory, the
index, the permission snapshot and the tool cache are set to them, so applying twice, or out of order, is
harmless. Sequence numbers may commit out of order (concurrent writers on PostgreSQL); a hole is waited for
up to `gap_horizon_seconds` (after that it was a rolled-back write). A full comparison with the catalog runs
every `full_catchup_seconds` and after Redis comes back, for whatever was missed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from service.catalog.events import publish_tools_changed
from service.catalog.reconcile import catalog_differences, follow_tools
from service.cluster.changes import SERVER_ADDED, SERVER_REMOVED, changes_after, first_seq
from service.cluster.state import cluster_state
from service.db.models import CatalogChange, as_utc, utcnow
from service.errors import counted
from service.policy.service import refresh_catalog

if TYPE_CHECKING:
    from service.resources import Resources

logger = logging.getLogger(__name__)

ServerHook = Callable[[str], Awaitable[None]]
FOLLOWER_TASK = "catalog-follower"


class CatalogFollower:
    """Applies the catalog changes other replicas commit to this replica's in-memory state and index."""

    def __init__(self, resources: Resources, start_seq: int) -> None:
        self.resources = resources
        self.settings = resources.settings.cluster
        self.watermark = start_seq  # every change up to here is applied (or was a hole past the horizon)
        self.applied = 0
        self.last_applied_at: float | None = None
        self._done: set[int] = set()  # applied changes above the watermark
        self._holes: dict[int, float] = {}  # missing seq -> when first missed
        self._wake = asyncio.Event()
        self._full = False
        self.on_server_added: list[ServerHook] = []
        self.on_server_removed: list[ServerHook] = []
        self.on_tools_changed: list[ServerHook] = []  # per server whose tools changed (tool caches)
        self.on_round: list[Callable[[], Awaitable[None]]] = []  # after each round (writer claims)
        self.on_full: list[Callable[[], Awaitable[None]]] = []  # after a full catch-up (server comparison)

    def wake(self, full: bool = False) -> None:
        """Read the change sequence now (and compare everything when `full`)."""
        self._full = self._full or full
        self._wake.set()

    def start(self) -> None:
        """Follow in the background under the service's supervisor (shown in /readyz as `catalog-follower`)."""
        self.resources.supervisor.start(FOLLOWER_TASK, self.run)

    async def close(self) -> None:
        """Stop following (no hook is called afterwards)."""
        await self.resources.supervisor.stop(FOLLOWER_TASK)

    def _poll_seconds(self) -> float:
        bus = cluster_state(self.resources).bus
        return self.settings.poll_seconds if bus is not None and bus.healthy else self.settings.fallback_poll_seconds

    async def run(self) -> None:
        """Follow until cancelled; an error (the database away) ends the run and the supervisor restarts it
        with backoff, from the watermark reached."""
        last_full = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_seconds())
            self._wake.clear()
            await self.catch_up()
            if self._full or time.monotonic() - last_full >= self.settings.full_catchup_seconds:
                self._full = False
                await self.full_catch_up()
                last_full = time.monotonic()
            for hook in self.on_round:
                await hook()

    async def catch_up(self) -> int:
        """Apply the committed changes not applied yet; returns how many."""
        async with self.resources.session() as session:
            rows = list(await changes_after(session, self.watermark))
            if rows and rows[0].seq > self.watermark + 1 and await first_seq(session) == rows[0].seq:
                self._skip_pruned(rows[0])
        new = [row for row in rows if row.seq not in self._done]
        foreign = [row for row in new if row.origin != cluster_state(self.resources).replica_id]
        if foreign:
            await self._apply(foreign)
        self._done.update(row.seq for row in new)
        self._advance()
        return len(foreign)

    def _skip_pruned(self, first: CatalogChange) -> None:
        """No change at or below the watermark is kept, and the first one kept is older than the gap horizon: the
        ones between were pruned (`cluster.change_retention_hours`: this replica fell that far behind) or rolled
        back long ago. Go on from the first one kept, and compare the whole catalog for what the pruned ones did,
        instead of waiting a horizon for each missing number."""
        if (utcnow() - as_utc(first.created_at)).total_seconds() < self.settings.gap_horizon_seconds:
            return
        logger.warning(
            "catalog changes %d-%d were pruned before this replica followed them: comparing the whole catalog",
            self.watermark + 1,
            first.seq - 1,
        )
        self.watermark = first.seq - 1
        self._done = {seq for seq in self._done if seq > self.watermark}
        self._holes = {seq: since for seq, since in self._holes.items() if seq > self.watermark}
        self._full = True

    def _advance(self) -> None:
        top = max(self._done, default=self.watermark)
        now = time.monotonic()
        while self.watermark < top:
            following = self.watermark + 1
            if following in self._done:
                self._done.discard(following)
            elif now - self._holes.setdefault(following, now) < self.settings.gap_horizon_seconds:
                return  # a write still in flight, or rolled back: look again next round
            self._holes.pop(following, None)
            self.watermark = following

    async def _apply(self, rows: Sequence[CatalogChange]) -> None:
        resources = self.resources
        names = sorted({name for row in rows for name in row.names})
        for row in rows:
            if row.kind == SERVER_REMOVED and row.server_id:
                for hook in self.on_server_removed:
                    await hook(row.server_id)
        changed: dict[str, set[str] | None] = dict(await follow_tools(resources, names))
        for row in rows:
            if row.kind == SERVER_ADDED and row.server_id:
                for hook in self.on_server_added:
                    await hook(row.server_id)
        for row in rows:
            if not row.server_id:
                continue
            if row.kind == SERVER_REMOVED:
                changed[row.server_id] = None  # as the replica that removed it tells it: of the server
            else:  # its tools shown before or after (follow_tools); one held since it came concerns no caller
                changed.setdefault(row.server_id, set())
        await self._changed(changed)
        self.applied += len(rows)
        self.last_applied_at = time.time()
        logger.info(
            "followed %s of other replicas (%s)", counted(len(rows), "catalog change"), counted(len(names), "tool")
        )

    async def _changed(self, changed: Mapping[str, set[str] | None]) -> None:
        """Tell this replica's hooks and /events subscribers which servers' tools changed, with the tools when
        known: only a caller that may use one of them hears of it, as on the replica that made the change."""
        await refresh_catalog(self.resources)
        for server in sorted(changed):
            for hook in self.on_tools_changed:
                await hook(server)
            publish_tools_changed(self.resources, server, changed[server])  # /events subscribers re-list

    async def full_catch_up(self) -> None:
        """Compare the whole catalog with this replica's directory and index; fix what differs."""
        names = await catalog_differences(self.resources)
        if names:
            logger.info(
                "catalog catch-up: %s differed from the catalog of record", counted(len(names), "tool")
            )
            await self._changed(await follow_tools(self.resources, names))
        for hook in self.on_full:
            await hook()
