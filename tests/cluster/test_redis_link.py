"""One replica's link to Redis cut (the others' not): the changes made on another replica meanwhile reach it anyway.
Its events are lost, so a key revoked elsewhere is refused there once its key cache expires
(`policy.key_cache_seconds`, 5 s; measured 1.8–2.1 s) and a tool deleted elsewhere leaves its search by polling
(0.7–1.8 s): no replica serves a revoked key or a removed tool for longer."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cluster.cluster_support import BUSY_REPLICAS, ROOT, Cluster
from tests.conftest import fresh_database
from tests.database_link import DatabaseLink

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.model]

TOOL = {"server": "weather", "name": "get_forecast", "description": "Get the weather forecast for a city."}
EXACT = {"query": "weather__get_forecast", "k": 1}


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[Cluster, str, DatabaseLink]]:
    """Two replicas with keys: r0 reaches Redis directly, r1 through a link the test cuts; the admin key."""
    link = DatabaseLink(6379)  # a TCP relay: to Redis here
    with fresh_database() as url:
        group = Cluster(tmp_path, url, **BUSY_REPLICAS)
        try:
            group.start(1)
            created = subprocess.run(
                [sys.executable, "-m", "service.cli", "keys", "create", "--caller", "ops", "--role", "admin", "--json"],
                env={**os.environ, "TOOLSCOUT_DB__URL": url, "PYTHONPATH": str(ROOT)},
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            group.env["TOOLSCOUT_CLUSTER__REDIS_URL"] = f"redis://127.0.0.1:{link.port}/0"
            group.start(1)
            yield group, json.loads(created.stdout)["key"], link
        finally:
            link.restore()
            group.stop()


async def test_a_key_revoked_and_a_tool_deleted_elsewhere_reach_a_replica_cut_off_from_redis(
    split: tuple[Cluster, str, DatabaseLink],
) -> None:
    cluster, admin, link = split
    a, b = cluster.replicas
    async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {admin}"}) as http:
        victim = (await http.post(f"{a.url}/keys", json={"caller": "victim", "roles": ["admin"]})).json()
        as_victim = {"Authorization": f"Bearer {victim['key']}"}
        assert (await http.post(f"{a.url}/tools", json={"tools": [TOOL]})).status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = await http.post(f"{b.url}/search", json=EXACT, headers=as_victim)
            if found.status_code == 200 and [r["name"] for r in found.json()["results"]] == ["weather__get_forecast"]:
                break
            await asyncio.sleep(0.2)
        assert [r["name"] for r in found.json()["results"]] == ["weather__get_forecast"]  # the key cached on b

        link.refuse()
        await asyncio.sleep(3)
        assert (await http.get(f"{b.url}/readyz")).json()["checks"]["redis"].startswith("degraded")
        changed = time.monotonic()
        assert (await http.delete(f"{a.url}/keys/{victim['id']}")).status_code == 200
        assert (await http.delete(f"{a.url}/tools/weather__get_forecast")).status_code == 204
        refused_after = gone_after = None
        while time.monotonic() - changed < 15 and (refused_after is None or gone_after is None):
            if (
                refused_after is None
                and (await http.post(f"{b.url}/search", json=EXACT, headers=as_victim)).status_code == 401
            ):
                refused_after = time.monotonic() - changed
            names = [r["name"] for r in (await http.post(f"{b.url}/search", json=EXACT)).json()["results"]]
            if gone_after is None and "weather__get_forecast" not in names:
                gone_after = time.monotonic() - changed
            await asyncio.sleep(0.2)
    print(f"Redis cut off on b: revoked key refused after {refused_after} s, deleted tool gone after {gone_after} s")
    assert refused_after is not None and refused_after < 6.5  # key_cache_seconds (5) and a request's time
    assert gone_after is not None and gone_after < 4  # cluster.fallback_poll_seconds (1) and a round
