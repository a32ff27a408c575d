"""Two replicas on one PostgreSQL database doing the same thing at the same moment: both answer a clear status,
the database holds each row once, and every replica's index holds exactly the tools the database has.

Each race runs a few rounds with new names: one round may miss the collision, several rarely do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.cluster.cluster_support import Cluster, Replica
from tests.conftest import _create_database, _drop_database

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.model]

ROUNDS = 4


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    """A fresh PostgreSQL database with a random name, dropped afterwards."""
    name = _create_database()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        _drop_database(name)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Cluster]:
    """Two replicas without a rate limit."""
    group = Cluster(tmp_path_factory.mktemp("races"), database_url, TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE="0")
    try:
        group.start(2)
        yield group
    finally:
        group.stop()


def rows(database_url: str, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """The rows of a query on the replicas' database, read directly."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return [tuple(r) for r in connection.execute(text(query), params)]
    finally:
        engine.dispose()


def active_tools(database_url: str, server: str) -> list[str]:
    """The qualified names of the server's active, unheld tools, each row once (duplicates would show)."""
    found = rows(
        database_url,
        "SELECT qualified_name FROM tools WHERE server_id = :server AND NOT deprecated AND held_reason IS NULL",
        server=server,
    )
    return sorted(name for (name,) in found)


def tools_of(server: str, count: int = 3) -> list[dict[str, Any]]:
    """New tools of one server, each with its own description."""
    return [
        {"server": server, "name": f"action_{i}", "description": f"Perform action number {i} of the {server} service."}
        for i in range(count)
    ]


async def indexed(http: httpx.AsyncClient, replica: Replica, server: str) -> list[str]:
    """What search on this replica finds of the server's tools."""
    body = {"query": f"{server} action", "k": 50, "servers": [server]}
    response = await http.post(f"{replica.url}/search", json=body)
    assert response.status_code == 200, response.text
    return sorted(r["name"] for r in response.json()["results"])


async def assert_index_matches(http: httpx.AsyncClient, cluster: Cluster, server: str, expected: list[str]) -> None:
    """Every replica's search finds exactly `expected` (waiting up to 10 s for the followers)."""
    deadline = time.monotonic() + 10
    found: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        found = {r.name: await indexed(http, r, server) for r in cluster.replicas}
        if all(names == expected for names in found.values()):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"index differs from the database {expected}: {found}")


def assert_no_stack_traces(cluster: Cluster) -> None:
    for replica in cluster.replicas:
        log = replica.log_text()
        assert "Traceback" not in log and "UniqueViolation" not in log, log[-3000:]


async def test_the_same_new_tools_registered_on_two_replicas_at_once_are_created_once(
    cluster: Cluster, database_url: str
) -> None:
    a, b = cluster.replicas[:2]
    async with httpx.AsyncClient(timeout=60) as http:
        for round_ in range(ROUNDS):
            server = f"twin{round_}"
            batch = {"tools": tools_of(server)}
            answers = await asyncio.gather(*(http.post(f"{r.url}/tools", json=batch) for r in (a, b)))
            assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
            counts = sorted((r.json()["created"], r.json()["unchanged"]) for r in answers)
            assert counts == [(0, 3), (3, 0)], counts
            expected = sorted(f"{server}__action_{i}" for i in range(3))
            assert active_tools(database_url, server) == expected
            assert rows(database_url, "SELECT count(*) FROM servers WHERE id = :s", s=server) == [(1,)]
            await assert_index_matches(http, cluster, server, expected)
    assert_no_stack_traces(cluster)
