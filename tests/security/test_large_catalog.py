"""Large IN lists: a restricted caller over a catalog of 100k tools, on SQLite and on PostgreSQL (the REST API
and the console's own routes)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event, insert

from service.db.models import Server, Tool, utcnow
from service.policy.service import refresh_catalog
from tests.security.conftest import bearer, cli_key, make_settings, running

TOOLS = 100_000
PERMISSIONS = """
roles:
  dev:
    allow: ["server:big"]
    deny: ["*9"]
"""


async def test_a_restricted_caller_pages_and_aggregates_over_100k_tools(tmp_path: Path, database_url: str) -> None:
    settings = make_settings(tmp_path, permissions=PERMISSIONS)
    settings.db.url = database_url
    async with running(settings) as (app, http):
        resources = app.state.resources
        now = utcnow()
        async with resources.session() as session:
            await session.execute(insert(Server), [{"id": "big", "transport": "catalog", "config": {}}])
            rows = [
                {
                    "qualified_name": f"big__tool_{i}",
                    "server_id": "big",
                    "name": f"tool_{i}",
                    "description": "d",
                    "input_schema": {},
                    "annotations": {},
                    "tags": [],
                    "content_hash": "h",
                    "deprecated": False,
                    "first_seen_at": now,
                    "last_seen_at": now,
                }
                for i in range(TOOLS)
            ]
            for start in range(0, TOOLS, 10_000):
                await session.execute(insert(Tool), rows[start : start + 10_000])
            await session.commit()
        await refresh_catalog(resources)
        dev = await cli_key(app, "dev-agent", ["dev"])
        loaded: list[object] = []

        def record(target: object, _context: object) -> None:
            loaded.append(target)

        event.listen(Tool, "load", record)
        try:
            page = await http.get("/tools", params={"limit": 3}, headers=bearer(dev))
            later = await http.get("/tools", params={"limit": 2, "offset": 89_998}, headers=bearer(dev))
        finally:
            event.remove(Tool, "load", record)
        assert page.status_code == 200, page.text
        assert page.json()["total"] == TOOLS - TOOLS // 10
        assert [t["name"] for t in page.json()["tools"]] == ["big__tool_0", "big__tool_1", "big__tool_10"]
        assert [t["name"] for t in later.json()["tools"]] == ["big__tool_99997", "big__tool_99998"]
        assert len(loaded) <= 5  # a page is read, not the catalog (90k rows: 2.5 s of the event loop a request)
        usage = await http.get("/analytics/tools", headers=bearer(dev))
        assert usage.status_code == 200 and usage.json() == {"tools": []}
        never = await http.get("/analytics/tools/never-found", params={"limit": 2}, headers=bearer(dev))
        assert never.status_code == 200 and len(never.json()["tools"]) == 2
        funnel = await http.get("/console/api/funnel", headers=bearer(dev))
        assert funnel.status_code == 200, funnel.text
        assert funnel.json()["followed_by_success"] == 0
