"""What a restricted key reads of the analytics is made of its own rows: the tools no search returned were the one
answer made of every caller's searches, and with `since` and `last_returned_at` it told when another caller's search
returned which tool (measured on a live service: a dev key read that another dev caller's search returned
probe__echo and probe__big at 16:23:56.622, the moment of that search)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx

from service.usage.learning import refresh_stats
from tests.security.conftest import assert_problem, bearer, cli_key


async def returned_since(http: httpx.AsyncClient, key: str, tool: str) -> bool:
    """Whether the tool is listed as last returned by a search before now (admins see every caller's searches)."""
    now = datetime.now(UTC).isoformat()
    listed = await http.get("/analytics/tools/never-found", params={"since": now}, headers=bearer(key))
    return any(t["tool"] == tool and t["last_returned_at"] for t in listed.json()["tools"])


async def test_tools_never_found_tell_a_restricted_key_nothing_of_other_callers_searches(
    world: dict[str, Any],
) -> None:
    app, http, dev = world["app"], world["http"], world["dev"]
    before = datetime.now(UTC) - timedelta(seconds=5)
    colleague = await cli_key(app, "colleague", ["dev"])
    searched = await http.post(
        "/search", json={"query": "weather forecast for a city", "k": 1}, headers=bearer(colleague)
    )
    assert [r["name"] for r in searched.json()["results"]] == ["public__get_weather"]
    with anyio.fail_after(20):  # the search log is written in batches, then folded by the statistics refresh
        while not await returned_since(http, world["admin"], "public__get_weather"):
            await refresh_stats(app.state.resources)
            await anyio.sleep(0.2)

    # With `since`, the list said which tools some search returned since then, and when (the colleague's search).
    asked = await http.get("/analytics/tools/never-found", params={"since": before.isoformat()}, headers=bearer(dev))
    body = assert_problem(asked, 403, "permission-denied")
    assert "Only admins" in body["detail"] and "weather" not in asked.text

    listed = await http.get("/analytics/tools/never-found", headers=bearer(dev))
    assert listed.status_code == 200, listed.text
    assert [t["last_returned_at"] for t in listed.json()["tools"]] == [None] * len(listed.json()["tools"])

    # An admin reads every caller's rows, `since` and the times included.
    assert await returned_since(http, world["admin"], "public__get_weather")
