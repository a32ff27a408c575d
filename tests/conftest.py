"""Shared fixtures: explicit settings in a temporary folder, an app with its lifespan run, PostgreSQL."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import httpx
import pytest
from sqlalchemy import create_engine, text

from indexer.embedding import Embedder, HashingEmbedder
from indexer.intents import split_intents, whole_from_parts_applies
from service.catalog.files import demo_catalog
from service.catalog.server_info import demo_servers
from service.catalog.service import register_tools
from service.main import create_app
from service.resources import Resources, build_resources, close_resources, start_resources
from service.search.service import WARM_UP, start_search
from service.settings import SearchSettings, Settings
from service.upstream.demo import NODE_DEMO, PYTHON_DEMO, ensure_node_packages, ensure_python_packages, node_available
from tests.upstream.upstream_support import toolchain_path

if TYPE_CHECKING:
    from tests.database_link import DatabaseLink

FIXTURES = Path(__file__).parent / "fixtures"
POSTGRES_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


# Texts each start-up embeds: its warm-up searches, each a request and its parts.
# A request of search.whole_from_parts parts or more embeds its parts only.
WARM_UP_TEXTS = sum(
    len(parts) if whole_from_parts_applies(parts, SearchSettings().whole_from_parts) else 1 + len(parts)
    for parts in map(split_intents, WARM_UP)
)


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Settings for a test: everything under tmp_path, no demo servers."""
    values: dict[str, object] = {"data_dir": tmp_path, "demo_catalog": False}
    values.update(overrides)
    settings = Settings(**values)  # type: ignore[arg-type]
    settings.execution.demo_servers = False
    # The MCP tests register the stdio test server over the API, which is off by default (issue 9).
    settings.execution.allow_api_stdio = True
    settings.execution.api_stdio_commands = [sys.executable]
    return settings


@asynccontextmanager
async def demo_resources(data_dir: Path, embedder: Embedder) -> AsyncIterator[Resources]:
    """Started resources and retriever with the bundled catalogs of real MCP servers registered."""
    resources = build_resources(make_settings(data_dir), embedder)
    await start_resources(resources)
    await start_search(resources)
    report = await register_tools(resources, demo_catalog(), servers=demo_servers())
    assert not report.errors
    try:
        yield resources
    finally:
        await close_resources(resources)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on an app with the fast deterministic embedder, lifespan run."""
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield http


def _create_database() -> str:
    name = f"toolscout_test_{uuid.uuid4().hex[:10]}"
    engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return name


def _drop_database(name: str) -> None:
    engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


@contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database with a random name, dropped afterwards."""
    name = _create_database()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        _drop_database(name)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    with fresh_database() as url:
        yield url


@pytest.fixture
def linked() -> Iterator[tuple[DatabaseLink, str]]:
    """A fresh PostgreSQL database, migrated, and its URL through a link the test can cut."""
    from service.db.engine import upgrade_database
    from tests.database_link import DatabaseLink

    link = DatabaseLink()
    with fresh_database() as url:
        upgrade_database(url)
        try:
            yield link, link.url(url)
        finally:
            link.restore()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test using this runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'catalog.db'}"
        return
    with fresh_database() as url:
        yield url


@pytest.fixture(scope="session")
async def python_servers() -> str:
    """An interpreter running mcp-server-time, -git and -fetch (installed on first use)."""
    return await ensure_python_packages(
        toolchain_path(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )


def missing_extra(reason: str) -> NoReturn:
    """A test needs a tool that scripts/install-test-extras.sh installs. Run by scripts/test.sh (and so by CI),
    which sets TOOLSCOUT_TEST_EXTRAS=required after installing them, that is a failure; run by hand without
    them, a skip."""
    if os.environ.get("TOOLSCOUT_TEST_EXTRAS") == "required":
        pytest.fail(f"{reason}, but scripts/test.sh installed the test extras", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
async def node_modules() -> Path:
    """node_modules with server-memory, server-filesystem and server-everything (installed on first use)."""
    if not node_available():
        missing_extra("Node.js and npm are not installed")
    return await ensure_node_packages(toolchain_path(), list(NODE_DEMO.values()))
