"""The demo catalog goes with the demo servers: a servers file replaces both. With one, the 85 demo tools were indexed
all the same, as catalog-only entries (github, slack, git ... without a connection) ranked among the file's own."""

from __future__ import annotations

from pathlib import Path

import httpx

from indexer.embedding import HashingEmbedder
from service.main import create_app
from tests.conftest import make_settings


async def _tools(settings_dir: Path, servers_file: Path | None) -> list[str]:
    settings = make_settings(settings_dir, demo_catalog=True)
    settings.execution.servers_file = servers_file
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as http:
            response = await http.get("/tools", params={"limit": 500})
    assert response.status_code == 200, response.text
    return [tool["name"] for tool in response.json()["tools"]]


async def test_a_servers_file_replaces_the_demo_catalog_as_it_replaces_the_demo_servers(tmp_path: Path) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text('{"mcpServers": {}}')
    assert await _tools(tmp_path / "own", servers) == []
    demo = await _tools(tmp_path / "demo", None)
    assert len(demo) == 85 and "time__get_current_time" in demo and "github__list_commits" in demo
