"""A catalog-only server goes with its last tool (service/catalog/removal.py): GET /servers and the MCP `status`
tool no longer show it with 0 tools; a registration of one of its tools brings it back."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from indexer.embedding import HashingEmbedder
from service.main import create_app
from tests.catalog.test_tools_api import TIME_TOOLS
from tests.conftest import make_settings
from tests.mcp.conftest import client_of, frontend_of, text_of


async def test_a_catalog_only_server_goes_with_its_last_tool(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    app = create_app(settings, embedder=HashingEmbedder())
    weather = {"server": "weather", "name": "get_forecast", "description": "Forecast for a city"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            assert (await http.post("/tools", json={"tools": [*TIME_TOOLS, weather]})).status_code == 200
            assert (await http.delete("/tools/time__convert_time")).status_code == 204
            one_left = {s["id"]: s["tools"] for s in (await http.get("/servers")).json()["servers"]}
            assert (await http.delete("/tools/time__get_current_time")).status_code == 204
            none_left = {s["id"]: s["tools"] for s in (await http.get("/servers")).json()["servers"]}
            gone = await http.get("/servers/time")
            async with frontend_of(settings, transport) as frontend, client_of(frontend) as (mcp, _):
                status = json.loads(text_of(await mcp.call_tool("status", {})))
            assert (await http.post("/tools", json={"tools": TIME_TOOLS[:1]})).status_code == 200
            back = (await http.get("/servers/time")).json()

    assert one_left == {"time": 1, "weather": 1}
    assert none_left == {"weather": 1}
    assert gone.status_code == 404 and gone.headers["content-type"] == "application/problem+json"
    assert [(s["id"], s["tools"]) for s in status["servers"]] == [("weather", 1)] and status["tools"] == 1
    assert (back["state"], back["tools"]) == ("catalog", 1)
