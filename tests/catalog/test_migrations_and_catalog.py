"""Migrations and the catalog of record on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, select

from indexer.embedding import HashingEmbedder
from indexer.index.base import DENSE_FIELDS, IndexPoint
from indexer.index.qdrant import QdrantIndex
from indexer.lexical import SparseVector
from service.catalog.service import register_tools, sync_server_tools
from service.db.engine import downgrade_database, sync_url, upgrade_database
from service.db.models import Base, Server, Tool
from service.main import create_app
from tests.conftest import WARM_UP_TEXTS, make_settings
from tests.indexer.test_qdrant_adapter import old_layout

pytestmark = pytest.mark.postgres


def test_migrations_create_every_table_and_revert(database_url: str) -> None:
    upgrade_database(database_url)
    engine = create_engine(sync_url(database_url))
    tables = set(inspect(engine).get_table_names())
    assert set(Base.metadata.tables) <= tables and "alembic_version" in tables
    columns = {c["name"] for c in inspect(engine).get_columns("executions")}
    assert {"caller", "tool", "search_id", "arguments_digest", "status", "duration_ms", "input_tokens"} <= columns
    downgrade_database(database_url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    upgrade_database(database_url)
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_the_alembic_command_migrates_the_database_of_the_settings(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: "`alembic upgrade head` works too", on TOOLSCOUT_DB__URL (alembic.ini names no database)."""
    monkeypatch.setenv("TOOLSCOUT_DB__URL", database_url)
    command.upgrade(Config(str(Path(__file__).resolve().parents[2] / "alembic.ini")), "head")
    engine = create_engine(sync_url(database_url))
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    engine.dispose()


async def test_catalog_registers_syncs_and_deprecates(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    settings.db.url = database_url
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        resources = app.state.resources
        report = await register_tools(resources, [
            {"server": "Chemical Engineering/Forensics", "name": "analyzeEvidence", "description": "Analyze evidence"},
            {"server": "git", "name": "git_status", "description": "Show the working tree status",
             "annotations": {"readOnlyHint": True}},
        ])
        assert report.created == ["Chemical_Engineering_Forensics__analyzeEvidence", "git__git_status"]
        listed = [{"name": "git_status", "description": "Show the working tree status",
                   "annotations": {"readOnlyHint": True}},
                  {"name": "git_log", "description": "Show commit logs"}]
        synced = await sync_server_tools(resources, "git", listed, transport="stdio", config={"command": "git-mcp"})
        assert (synced.created, synced.unchanged, synced.removed) == (["git__git_log"], ["git__git_status"], [])
        synced = await sync_server_tools(resources, "git", listed[1:], transport="stdio", config={"command": "x"})
        assert synced.removed == ["git__git_status"]
        async with resources.session() as session:
            gone = await session.get(Tool, "git__git_status")
            assert gone is not None and gone.deprecated and gone.annotations == {"readOnlyHint": True}
            server = await session.get(Server, "git")
            assert server.transport == "stdio" and server.config == {"command": "x"} and server.last_sync_at
            active = (await session.scalars(select(Tool.qualified_name).where(Tool.deprecated.is_(False)))).all()
        assert sorted(active) == ["Chemical_Engineering_Forensics__analyzeEvidence", "git__git_log"]
        assert sorted(resources.index.content_hashes()) == sorted(active)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            assert (await client.get("/tools/git__git_status")).status_code == 404
            results = (await client.post("/search", json={"query": "git status"})).json()["results"]
            assert "git__git_status" not in [r["name"] for r in results]


class CountingEmbedder(HashingEmbedder):
    """The fake embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.texts += len(texts)
        return super().embed(texts)


async def test_restart_reconciles_without_embedding_again(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    embedder = CountingEmbedder()
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        await register_tools(app.state.resources, [{"server": "s", "name": f"t{i}"} for i in range(20)])
    # A tool with only a name indexes the same text in all three dense fields; it is embedded once (plus the texts
    # of the warm-up searches of each start).
    assert embedder.texts == 20 + WARM_UP_TEXTS
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        resources = app.state.resources
        assert embedder.texts == 20 + 2 * WARM_UP_TEXTS
        assert resources.index.count() == 20
        assert len(resources.retriever.directory) == 20


async def test_a_qdrant_collection_of_an_older_layout_is_refilled_from_the_catalog_at_start(tmp_path: Path) -> None:
    """A collection with Qdrant's own IDF on its lexical vectors is recreated when the index opens, and
    reconcile_index fills it again from the catalog's stored vectors: nothing is embedded again."""
    settings = make_settings(tmp_path, index={"backend": "qdrant", "url": ":memory:"})
    embedder = CountingEmbedder()
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        await register_tools(
            app.state.resources, [{"server": "s", "name": f"t{i}", "description": f"Read file {i}"} for i in range(20)]
        )
    embedded = embedder.texts
    index = QdrantIndex(":memory:", settings.index.collection, embedder.dimension)
    old_layout(index)
    unit = [1.0] + [0.0] * (embedder.dimension - 1)
    index.upsert([IndexPoint("s__gone", dict.fromkeys(DENSE_FIELDS, unit), SparseVector([1], [1.0]), {"server": "s"})])
    index.ensure_collection()  # as the index opens (open_index)
    app = create_app(settings, embedder=embedder, index=index)
    async with app.router.lifespan_context(app):
        assert embedder.texts == embedded + WARM_UP_TEXTS
        assert set(index.content_hashes()) == {f"s__t{i}" for i in range(20)}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            body = (await client.post("/search", json={"query": "read file 7", "explain": True})).json()
    assert body["results"][0]["explain"]["similarity"]["lexical"] > 0
