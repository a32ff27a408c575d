"""The catalog of record: register and remove tools; keep the vector index in step with SQL (lookup.py: find, list).

SQL is written first and committed, then the index is synced; start-up reconciles the two, so a crash in
between loses nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.documents import content_hash
from indexer.pipeline import DenseVectors, SyncReport, index_tools
from indexer.tools import SEPARATOR, ToolDefinition, ToolProblem, ValidatedBatch, normalize_server_id, validate_batch
from service.catalog.events import publish_tools_changed, shown_tools
from service.catalog.holds import Review, judged, trust
from service.catalog.server_info import screened, store_info
from service.catalog.server_vectors import refresh_servers
from service.cluster.changes import TOOLS, record_change
from service.cluster.state import announce, cluster_state
from service.cluster.vectors import embedder_id, save_vectors, vectors_for
from service.db.among import among
from service.db.engine import CATALOG_WRITE_LOCK_KEY, take_turn
from service.db.models import Server, Tool, utcnow
from service.resources import Resources

logger = logging.getLogger(__name__)


@dataclass
class RegisterReport:
    """Counts of a registration batch and the problems of the tools that were refused."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[ToolProblem] = field(default_factory=list)
    warnings: list[ToolProblem] = field(default_factory=list)  # keys no tool has, ignored
    more_warnings: int = 0  # such keys past the first MAX_WARNINGS, counted only
    held: dict[str, str] = field(default_factory=dict)  # the batch's tools held for review, and why
    notes: list[str] = field(default_factory=list)  # what was dropped or held of the servers' own info blocks
    shown: set[str] = field(default_factory=set)  # the changed tools callers were or are shown (events.shown_tools)

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": len(self.created),
            "updated": len(self.updated),
            "unchanged": len(self.unchanged),
            "removed": len(self.removed),
            "tools": self.created + self.updated + self.unchanged,
            "errors": [e.as_dict() for e in self.errors],
            "warnings": [w.as_dict() for w in self.warnings],
            **({"more_warnings": self.more_warnings} if self.more_warnings else {}),
            "held": [{"name": name, "reason": reason} for name, reason in sorted(self.held.items())],
        }


def to_definition(row: Tool) -> ToolDefinition:
    """The tool model of a catalog row."""
    return ToolDefinition(
        server=row.server_id,
        name=row.name,
        description=row.description,
        input_schema=row.input_schema,
        annotations=row.annotations,
        tags=tuple(row.tags or ()),
    )


def tool_view(row: Tool) -> dict[str, Any]:
    """The public shape of a tool (REST and MCP)."""
    return {
        "name": row.qualified_name,
        "server": row.server_id,
        "tool": row.name,
        "description": row.description,
        "input_schema": row.input_schema,
        "annotations": row.annotations,
        "tags": list(row.tags or ()),
        "deprecated": row.deprecated,
    }


async def ensure_server(
    session: AsyncSession, server_id: str, transport: str = "catalog", config: dict[str, Any] | None = None
) -> Server:
    """The server row, created if needed."""
    server = await session.get(Server, server_id)
    if server is None:
        server = Server(id=server_id, transport=transport, config=config or {})
        session.add(server)
        await session.flush()
    elif config is not None:
        server.transport, server.config = transport, config
    return server


async def _upsert_rows(
    session: AsyncSession, tools: list[ToolDefinition], report: RegisterReport, review: Review
) -> None:
    """Write the batch's rows, judged for holds by `review` (holds.judge); the held ones go to `report.held`."""
    names = [t.qualified_name for t in tools]
    # Hashes first: a re-registration of unchanged tools loads no row (only the changed ones are loaded).
    hashes: dict[str, tuple[str, bool]] = {}
    untrusted: set[str] = set()  # rows an upstream never listed (a bundled catalog's, or from before 0010)
    if names:
        query = select(Tool.qualified_name, Tool.content_hash, Tool.deprecated, Tool.held_reason, Tool.trusted_hash)
        for name, digest, deprecated, held, trusted in await session.execute(
            query.where(among(Tool.qualified_name, names))
        ):
            hashes[name] = (digest, deprecated)
            if held is not None:
                report.held[name] = held
            elif trusted is None:
                untrusted.add(name)
    digests = {t.qualified_name: content_hash(t) for t in tools}
    stale = [name for name, digest in digests.items() if name in hashes and hashes[name] != (digest, False)]
    loaded = (await session.scalars(select(Tool).where(among(Tool.qualified_name, stale)))).all() if stale else []
    existing = {row.qualified_name: row for row in loaded}
    now = utcnow()
    await _ensure_servers(session, {t.server for t in tools})
    unchanged: list[str] = []
    for tool in tools:
        digest = digests[tool.qualified_name]
        row = existing.get(tool.qualified_name)
        if row is None and tool.qualified_name in hashes:
            unchanged.append(tool.qualified_name)
            report.unchanged.append(tool.qualified_name)
        elif row is None:
            row = Tool(
                qualified_name=tool.qualified_name,
                server_id=tool.server,
                name=tool.name,
                description=tool.description,
                input_schema=tool.input_schema,
                annotations=tool.annotations,
                tags=list(tool.tags),
                content_hash=digest,
                first_seen_at=now,
                last_seen_at=now,
            )
            judged(report.held, row, tool, review, fresh=True, now=now)
            session.add(row)
            report.created.append(tool.qualified_name)
        elif row.content_hash != digest or row.deprecated:
            judged(report.held, row, tool, review, fresh=False, now=now)
            row.server_id, row.name, row.description = tool.server, tool.name, tool.description
            row.input_schema, row.annotations, row.tags = tool.input_schema, tool.annotations, list(tool.tags)
            row.content_hash, row.deprecated, row.last_seen_at = digest, False, now
            report.updated.append(tool.qualified_name)
    if unchanged:  # one UPDATE for all unchanged tools, not one per row
        await session.execute(
            update(Tool).where(among(Tool.qualified_name, unchanged)).values(last_seen_at=now),
            execution_options={"synchronize_session": False},
        )
    if review.listed:  # the upstream's first listing of rows it did not write: trusted on first use, as new rows are
        untrusted.intersection_update(unchanged)
        await trust(session, [t for t in tools if t.qualified_name in untrusted], now)


async def _ensure_servers(session: AsyncSession, server_ids: set[str]) -> None:
    """Create the catalog server rows that are missing, in one query and one flush."""
    if not server_ids:
        return
    known = set((await session.scalars(select(Server.id).where(among(Server.id, server_ids)))).all())
    session.add_all(Server(id=sid, transport="catalog", config={}) for sid in sorted(server_ids - known))
    await session.flush()


def _server_ids(raw_tools: list[Any], default_server: str | None) -> list[Any]:
    """Registrations may name servers freely; the catalog stores MCP-safe server ids."""
    fixed = []
    for raw in raw_tools:
        if isinstance(raw, dict):
            server = raw.get("server", default_server)
            if isinstance(server, str) and server.strip():
                raw = {**raw, "server": normalize_server_id(server)}
        fixed.append(raw)
    return fixed


async def register_tools(
    resources: Resources,
    raw_tools: list[Any],
    default_server: str | None = None,
    servers: Mapping[str, Any] | None = None,
) -> RegisterReport:
    """Validate a batch, write the good tools to SQL, index the new and changed ones (`servers`: server name ->
    the MCP server info block of the servers of the batch, for server-aware scoring)."""
    default_id = normalize_server_id(default_server) if default_server else None
    batch = validate_batch(_server_ids(raw_tools, default_server), default_id)
    report = RegisterReport(errors=list(batch.problems), warnings=batch.warnings, more_warnings=batch.more_warnings)
    infos = {normalize_server_id(name): info for name, info in (servers or {}).items()}
    async with resources.index_lock:
        admitted = await _admit(resources, batch, raw_tools, report)
        review = await Review.of(admitted, resources.settings.policy, listed=False)
        vectors, new = await vectors_for(resources, admitted)
        async with resources.session() as session:
            await take_turn(session, CATALOG_WRITE_LOCK_KEY)  # counts read after any replica's same batch committed
            await _upsert_rows(session, batch.tools, report, review)
            await save_vectors(session, new, embedder_id(resources.embedder))
            changed = set(report.created) | set(report.updated)
            _record_tools(resources, session, [t for t in batch.tools if t.qualified_name in changed])
            described = await store_info(session, screened(infos, report.notes), cluster_state(resources).replica_id)
            await session.commit()
        await _index_unheld(resources, batch.tools, vectors, report, changed, shown_before=changed)
        await refresh_servers(resources, {t.server for t in batch.tools} | described)
    if report.held and (gateway := resources.gateway) is not None:  # its cached rows of the tools now held
        for server in {t.server for t in batch.tools if t.qualified_name in report.held}:
            gateway.executor.tools.invalidate_server(server)
    for server in sorted({t.server for t in batch.tools if t.qualified_name in changed}):
        names = [t.qualified_name for t in batch.tools if t.server == server and t.qualified_name in report.shown]
        publish_tools_changed(resources, server, names)  # MCP front ends re-list (GET /events)
    if changed or described:
        await announce(resources)
    return report


async def _admit(
    resources: Resources, batch: ValidatedBatch, raw: list[Any], report: RegisterReport
) -> list[ToolDefinition]:
    """Drop from the batch the tools whose qualified name an active tool of another server holds, as conflicts
    (server `a` tool `b__c` and server `a__b` tool `c` are both `a__b__c`: the first keeps it, a listing must
    never turn another server's tool into its own); return the kept tools whose row is missing, deprecated or of
    another content. One read of the batch's rows for both."""
    names = [t.qualified_name for t in batch.tools]
    if not names:
        return []
    async with resources.session() as session:
        rows = await session.execute(
            select(Tool.qualified_name, Tool.server_id, Tool.name, Tool.content_hash).where(
                among(Tool.qualified_name, names), Tool.deprecated.is_(False)
            )
        )
        current = {name: (server, tool, digest) for name, server, tool, digest in rows.tuples().all()}
    kept = []
    for tool in batch.tools:
        holder = current.get(tool.qualified_name)
        if holder is None or holder[0] == tool.server:
            kept.append(tool)
            continue
        index = next((i for i, r in enumerate(raw) if isinstance(r, dict) and r.get("name") == tool.name), -1)
        reason = f"qualified name {tool.qualified_name} is already taken by {holder[0]}/{holder[1]}"
        report.errors.append(ToolProblem(index, tool.name, "name", reason, "conflict"))
        logger.warning("server %s: tool %r refused: %s", tool.server, tool.name[:80], reason)
    batch.tools[:] = kept
    return [t for t in kept if t.qualified_name not in current or current[t.qualified_name][2] != content_hash(t)]


def _record_tools(resources: Resources, session: AsyncSession, tools: list[ToolDefinition], *extra: str) -> None:
    """One change row per server, in the session's transaction (`extra`: names removed)."""
    by_server: dict[str, set[str]] = {}
    for tool in tools:
        by_server.setdefault(tool.server, set()).add(tool.qualified_name)
    for name in extra:
        by_server.setdefault(name.rpartition(SEPARATOR)[0], set()).add(name)  # a tool's part holds no separator
    for server, names in sorted(by_server.items()):
        record_change(session, TOOLS, names, server=server, origin=cluster_state(resources).replica_id)


async def index_definitions(
    resources: Resources,
    tools: list[ToolDefinition],
    vectors: dict[str, DenseVectors] | None = None,
    known_hashes: dict[str, str] | None = None,
) -> SyncReport:
    """Index these tools (embedding only those without `vectors`) and add them to the name directory."""
    index = resources.index
    assert index is not None and resources.retriever is not None
    report: SyncReport = await resources.run_indexing(
        # Catalog texts bypass the query cache: they would only evict the queries it is there for.
        lambda: index_tools(
            index,
            resources.embedder.inner,
            resources.encoder,
            tools,
            progress=resources.progress,
            known_hashes=known_hashes,
            stored=vectors,
        )
    )
    changed = set(report.upserted)  # unchanged tools are in the directory already (loaded from SQL at start)
    for tool in tools:
        if tool.qualified_name in changed:
            resources.retriever.directory.add(tool.qualified_name, tool.name, tool.server, tool.tags)
    return report


async def sync_server_tools(
    resources: Resources,
    server_id: str,
    raw_tools: list[Any],
    *,
    transport: str,
    config: dict[str, Any],
    info: Mapping[str, Any] | None = None,
    existing_only: bool = False,
) -> RegisterReport:
    """Make the catalog hold exactly this server's listed tools: new and changed ones indexed, the ones that
    disappeared marked deprecated and removed from the index (`info`: what the server said at initialize).
    `existing_only`: write nothing once the server's row is gone (removed on another replica meanwhile)."""
    raw = [{**t, "server": server_id} for t in raw_tools if isinstance(t, dict)]
    batch = validate_batch(raw, server_id, warn_unknown_keys=False)
    report = RegisterReport(errors=list(batch.problems))
    async with resources.index_lock:
        admitted = await _admit(resources, batch, raw, report)
        review = await Review.of(admitted, resources.settings.policy, listed=True)
        vectors, new = await vectors_for(resources, admitted)
        listed = {t.qualified_name for t in batch.tools}
        async with resources.session() as session:
            await take_turn(session, CATALOG_WRITE_LOCK_KEY)
            if existing_only and await session.get(Server, server_id) is None:
                logger.info("server %s was removed before its listing was written: not brought back", server_id)
                return report
            server = await ensure_server(session, server_id, transport, config)
            listed_before = server.last_sync_at is not None  # its info came from a listing: a change is held
            await _upsert_rows(session, batch.tools, report, review)
            gone = (
                await session.scalars(select(Tool).where(Tool.server_id == server_id, Tool.deprecated.is_(False)))
            ).all()
            for row in gone:
                if row.qualified_name not in listed:
                    row.deprecated = True
                    report.removed.append(row.qualified_name)
            server.last_sync_at = utcnow()
            await save_vectors(session, new, embedder_id(resources.embedder))
            changed = set(report.created) | set(report.updated)
            if changed or report.removed:
                _record_tools(
                    resources, session, [t for t in batch.tools if t.qualified_name in changed], *report.removed
                )
            infos = screened({server_id: info} if info else {}, report.notes)
            hold = listed_before and resources.settings.policy.hold_changed_tools
            origin = cluster_state(resources).replica_id
            described = await store_info(session, infos, origin, hold=hold, notes=report.notes)  # changes held
            await session.commit()
        await _index_unheld(resources, batch.tools, vectors, report, changed, shown_before=[*changed, *report.removed])
        if report.removed:
            await unindex(resources, report.removed)
        await refresh_servers(resources, [server_id])
    if changed or report.removed or described:
        await announce(resources)
    return report


async def _index_unheld(
    resources: Resources,
    tools: list[ToolDefinition],
    vectors: dict[str, DenseVectors],
    report: RegisterReport,
    changed: set[str],
    shown_before: Iterable[str],
) -> None:
    """Index the batch's tools that are not held; take out of the index those that were just held. The report's
    `shown`: the tools of `shown_before` callers were shown before, and the changed ones they are shown now."""
    report.shown = shown_tools(resources, shown_before)
    await index_definitions(resources, [t for t in tools if t.qualified_name not in report.held], vectors)
    if newly := sorted(name for name in report.held if name in changed):
        await unindex(resources, newly)
    report.shown |= shown_tools(resources, changed)


async def unindex(resources: Resources, names: list[str]) -> None:
    """Remove these tools from the index and the name directory."""
    index = resources.index
    assert index is not None and resources.retriever is not None
    await resources.run_index(index.delete, names)
    for name in names:
        resources.retriever.directory.remove(name)
