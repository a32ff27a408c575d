"""Least knowledge in scores: a restricted caller's search scores depend on the tools it may use only. BM25's
document frequencies and the dense fields' centring means are counted inside its permissions, so tools it may not
see, added or removed, move nothing it is shown (indexer/index/term_counts.py, PoolMatrix._scope_mean)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import bearer, opened_world

QUERY = "read the weather forecast for a city, and purge the cache"
HIDDEN = [
    {
        "server": "vault",
        "name": f"weather_secret_{i}",
        "description": f"Read the secret weather forecast {i} of a city from the vault cache",
    }
    for i in range(40)
]


INDEXES = {
    "edge": {},
    "qdrant": {"backend": "qdrant", "url": ":memory:"},  # the statistics of a Qdrant collection's adapter
}


@pytest.fixture(params=sorted(INDEXES))
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The security world on each index backend."""
    async with opened_world(tmp_path, index=INDEXES[request.param]) as opened:
        yield opened


async def ranking(http: Any, key: str) -> list[tuple[str, float, dict[str, Any]]]:
    response = await http.post("/search", json={"query": QUERY, "k": 50, "explain": True}, headers=bearer(key))
    assert response.status_code == 200, response.text
    return [(r["name"], r["score"], r["explain"]) for r in response.json()["results"]]


async def test_hidden_tools_added_or_removed_move_no_score_a_restricted_caller_sees(world: dict[str, Any]) -> None:
    http, admin, dev = world["http"], world["admin"], world["dev"]
    before, admin_before = await ranking(http, dev), await ranking(http, admin)
    assert {name for name, _, _ in before} == {"public__get_weather", "util__purge_cache"}
    assert all(explain["similarity"]["lexical"] > 0 for _, _, explain in before)

    added = await http.post("/tools", json={"tools": HIDDEN}, headers=bearer(admin))
    assert added.status_code == 200, added.text
    assert await ranking(http, dev) == before
    # The same tools do move what an unrestricted caller sees: the statistics are the scope's, not fixed.
    admin_after = {name: explain for name, _, explain in await ranking(http, admin)}
    weather = dict((name, explain) for name, _, explain in admin_before)["public__get_weather"]["similarity"]
    assert admin_after["public__get_weather"]["similarity"]["lexical"] < weather["lexical"]

    for tool in HIDDEN:
        removed = await http.delete(f"/tools/vault__{tool['name']}", headers=bearer(admin))
        assert removed.status_code in (200, 204), removed.text
    assert await ranking(http, dev) == before
    assert await ranking(http, admin) == admin_before
