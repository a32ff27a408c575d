"""Server-aware scoring: one document per server, embedded once per change, stored beside the catalog, blended
into each tool's score (service/catalog/server_vectors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from indexer.embedding import SentenceTransformerEmbedder
from indexer.index.base import SearchFilter
from indexer.servers import server_document, server_info
from service.catalog.files import demo_catalog
from service.catalog.removal import remove_server
from service.catalog.server_info import demo_servers
from service.catalog.server_vectors import refresh_servers
from service.catalog.service import register_tools
from service.db.models import CatalogChange, Server, ToolVectors
from service.resources import Resources, build_resources, close_resources, start_resources
from service.search.service import start_search
from tests.conftest import make_settings

pytestmark = pytest.mark.model


class CountingEmbedder(SentenceTransformerEmbedder):
    """The real model, counting the texts it embeds."""

    embedded = 0

    def embed(self, texts):  # type: ignore[no-untyped-def]
        CountingEmbedder.embedded += len(texts)
        return super().embed(texts)


async def _start(data_dir: Path, database_of: Path | None = None) -> Resources:
    settings = make_settings(data_dir)
    if database_of is not None:  # another replica of the same catalog
        settings.db.url = f"sqlite:///{(database_of / 'toolscout.db').resolve()}"
    resources = build_resources(settings, CountingEmbedder(threads=2))
    await start_resources(resources)
    await start_search(resources)
    return resources


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("servers"))


@pytest.fixture(scope="module")
async def demo(data_dir: Path) -> AsyncIterator[Resources]:
    resources = await _start(data_dir)
    assert not (await register_tools(resources, demo_catalog(), servers=demo_servers())).errors
    yield resources
    await close_resources(resources)


def test_the_document_is_what_the_server_says_of_itself_not_its_tools() -> None:
    info = server_info({"name": "mcp-time", "version": "1", "description": "Time  queries", "instructions": "Use UTC"})
    assert info == {"name": "mcp-time", "description": "Time queries", "instructions": "Use UTC"}
    assert server_document("time", info) == "time mcp time. Time queries. Use UTC"


async def test_every_server_has_one_vector_and_its_info_is_kept(demo: Resources) -> None:
    assert demo.retriever is not None
    assert demo.retriever.servers.servers() == sorted(demo_servers())
    async with demo.session() as session:
        everything = await session.get(Server, "everything")
        assert everything is not None and everything.info["title"] == "Everything Reference Server"
        assert everything.info["instructions"].startswith("# Everything Server")


async def test_explain_shows_the_server_signal_and_the_score_adds_up(demo: Resources) -> None:
    assert demo.retriever is not None
    outcome = await demo.retriever.search("remember that Alice works at Acme", 5, SearchFilter(), explain=True)
    top = {r.name: r for r in outcome.results}
    memory = next(r for name, r in top.items() if name.startswith("memory__"))
    assert memory.explain is not None and memory.explain["signals"]["server"] > 0
    assert 0 < memory.explain["similarity"]["server"] < 1
    assert abs(memory.score - sum(memory.explain["signals"].values())) < 1e-3


async def test_one_server_in_scope_leaves_the_scores_as_they_were(demo: Resources) -> None:
    assert demo.retriever is not None
    outcome = await demo.retriever.search("commit my changes", 3, SearchFilter(servers=("git",)), explain=True)
    assert outcome.results and all("server" not in r.explain["signals"] for r in outcome.results if r.explain)


async def test_a_changed_description_is_embedded_once_and_another_replica_embeds_nothing(
    demo: Resources, data_dir: Path, tmp_path: Path
) -> None:
    assert demo.retriever is not None
    before = demo.retriever.servers.digest("time")
    changed = {"time": {**demo_servers()["time"], "description": "Clocks, dates and time zones of any city"}}
    embedded = CountingEmbedder.embedded
    await register_tools(demo, [t for t in demo_catalog() if t["server"] == "time"], servers=changed)
    assert CountingEmbedder.embedded - embedded == 1  # the time server's document, nothing else
    assert demo.retriever.servers.digest("time") != before
    assert await refresh_servers(demo) == 0  # in step: nothing to do
    embedded = CountingEmbedder.embedded
    replica = await _start(tmp_path, database_of=data_dir)
    try:
        assert CountingEmbedder.embedded == embedded  # the server vectors are loaded, not embedded again
        assert replica.retriever is not None
        assert replica.retriever.servers.servers() == demo.retriever.servers.servers()
        assert replica.retriever.servers.digest("time") == demo.retriever.servers.digest("time")
        again = {"time": {**changed["time"], "title": "Time"}}
        await register_tools(demo, [t for t in demo_catalog() if t["server"] == "time"], servers=again)
        async with demo.session() as session:
            last = await session.scalar(select(CatalogChange).order_by(CatalogChange.seq.desc()).limit(1))
        assert last is not None and (last.server_id, last.names) == ("time", [])  # followed by the replicas
        embedded = CountingEmbedder.embedded
        assert await refresh_servers(replica, ["time"]) == 1  # what the follower does for a change row
        assert CountingEmbedder.embedded == embedded
        assert replica.retriever.servers.digest("time") == demo.retriever.servers.digest("time")
    finally:
        await close_resources(replica)
    async with demo.session() as session:
        assert await session.scalar(select(func.count()).select_from(ToolVectors)) >= 85 + 9


async def test_a_removed_server_loses_its_vector_and_one_that_says_nothing_gets_none(demo: Resources) -> None:
    assert demo.retriever is not None
    await register_tools(demo, [{"server": "plain", "name": "get_weather", "description": "Weather of a city"}],
                         servers={"plain": {"name": "weather-server", "version": "1.0"}})
    assert "plain" not in demo.retriever.servers.servers()  # a name is no description
    await remove_server(demo, "fetch")
    assert "fetch" not in demo.retriever.servers.servers()
    assert len(demo.retriever.servers) == len(demo_servers()) - 1


async def test_a_server_that_gives_only_its_name_keeps_the_description_its_catalog_gave(demo: Resources) -> None:
    from service.catalog.server_info import store_info

    async with demo.session() as session:
        before = (await session.get(Server, "memory")).info  # type: ignore[union-attr]
        assert "knowledge graph" in before["description"]
        # what the real memory server says at initialize: its name and no description
        await store_info(session, {"memory": {"name": "memory-server", "title": "Memory"}}, "test")
        await session.commit()
        after = (await session.get(Server, "memory")).info  # type: ignore[union-attr]
    assert after["description"] == before["description"]
    assert after["title"] == "Memory"  # what a source does give replaces the older value
