"""The index and the name directory kept in step with the catalog of record: at start-up (`reconcile_index`),
when another replica changed some tools (`follow_tools`) and in the follower's full comparison
(`catalog_differences`). Vectors come from the catalog's stored vectors, so only tools no replica ever embedded
are embedded here."""

from __future__ import annotations

import time

from sqlalchemy import select

from indexer.documents import content_hash
from indexer.pipeline import SyncReport
from indexer.tools import ToolDefinition
from service.catalog.service import index_definitions, to_definition, unindex
from service.cluster.vectors import embedder_id, save_vectors, vectors_for
from service.db.models import Tool, active
from service.resources import Resources


async def reconcile_index(resources: Resources) -> SyncReport:
    """At start-up: make the index hold exactly the active catalog. Vectors come from the catalog (only tools
    never embedded by any replica embed); a point is deleted only if the catalog does not hold it at delete
    time, so a tool another replica registered meanwhile (shared Qdrant) stays."""
    index = resources.index
    assert index is not None
    async with resources.index_lock:
        started = time.perf_counter()
        async with resources.session() as session:
            rows = (await session.scalars(select(Tool).where(active()))).all()
        tools = [to_definition(r) for r in rows]
        indexed: dict[str, str] = await resources.run_indexing(index.content_hashes)
        vectors, new = await vectors_for(resources, _not_indexed(tools, indexed))
        report = await index_definitions(resources, tools, vectors, known_hashes=indexed)
        if new:
            async with resources.session() as session:
                await save_vectors(session, new, embedder_id(resources.embedder))
                await session.commit()
        wanted = {t.qualified_name for t in tools}
        stale = [name for name in indexed if name not in wanted]
        if stale:
            kept = await _active_names(resources, stale)
            stale = [name for name in stale if name not in kept]
            await unindex(resources, stale)
        report.deleted = stale
        report.seconds = time.perf_counter() - started
        return report


def _not_indexed(tools: list[ToolDefinition], indexed: dict[str, str]) -> list[ToolDefinition]:
    return [t for t in tools if indexed.get(t.qualified_name) != content_hash(t)]


async def _active_names(resources: Resources, names: list[str]) -> set[str]:
    """Which of these names the catalog holds as active tools now."""
    found: set[str] = set()
    async with resources.session() as session:
        for start in range(0, len(names), 500):
            chunk = names[start : start + 500]
            query = select(Tool.qualified_name).where(Tool.qualified_name.in_(chunk), active())
            found.update((await session.scalars(query)).all())
    return found


async def follow_tools(resources: Resources, names: list[str]) -> dict[str, set[str]]:
    """Set the directory and the index to the catalog's current rows of these tools (another replica changed
    them); returns the tools touched by server. Vectors come from the catalog: nothing is embedded again."""
    index = resources.index
    assert index is not None and resources.retriever is not None
    if not names:
        return {}
    directory = resources.retriever.directory
    touched: dict[str, set[str]] = {}
    for name in names:  # a tool whose row is gone is known by the directory only, before it forgets it
        if (server := directory.server(name)) is not None:
            touched.setdefault(server, set()).add(name)
    async with resources.index_lock:
        rows: list[Tool] = []
        async with resources.session() as session:
            for start in range(0, len(names), 500):
                chunk = names[start : start + 500]
                rows.extend((await session.scalars(select(Tool).where(Tool.qualified_name.in_(chunk)))).all())
        tools = [to_definition(r) for r in rows if not r.deprecated and r.held_reason is None]
        payloads = await resources.run_index(index.payloads, names)
        indexed = {name: str(p.get("content_hash", "")) for name, p in payloads.items()}
        vectors, new = await vectors_for(resources, _not_indexed(tools, indexed))
        if new:  # the writer's vectors were missing (an older version of the service): store them once
            async with resources.session() as session:
                await save_vectors(session, new, embedder_id(resources.embedder))
                await session.commit()
        await index_definitions(resources, tools, vectors, known_hashes=indexed)
        for tool in tools:  # a shared index may hold them already; this replica's directory learns them here
            resources.retriever.directory.add(tool.qualified_name, tool.name, tool.server, tool.tags)
        active = {t.qualified_name for t in tools}
        gone = [name for name in names if name not in active]
        await unindex(resources, gone)
    for tool in tools:  # shown now; a held one is told of only if it was shown before (the directory's loop above)
        touched.setdefault(tool.server, set()).add(tool.qualified_name)
    return touched


async def catalog_differences(resources: Resources) -> list[str]:
    """The names on which the catalog of record, the index and the name directory disagree."""
    index = resources.index
    assert index is not None and resources.retriever is not None
    async with resources.session() as session:
        rows = await session.execute(select(Tool.qualified_name, Tool.content_hash).where(active()))
        catalog = dict(rows.tuples().all())
    indexed: dict[str, str] = await resources.run_indexing(index.content_hashes)
    directory = set(resources.retriever.directory.names())
    differ = {name for name, digest in catalog.items() if indexed.get(name) != digest or name not in directory}
    differ |= (set(indexed) | directory) - set(catalog)
    return sorted(differ)
