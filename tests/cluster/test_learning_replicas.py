"""The usage signal (issue 12, part 3) learned alike by every replica, whatever order the two logs' rows arrive in.

A search served by one replica and the call it led to, executed by another, are two rows written by two log
writers; either may reach the database late (a replica cut off from it spills its rows and replays them when the
link is back). Before, each replica read the evidence in `finished_at` order past an in-memory mark: a call whose
search row came later than the refresh lag, or a call replayed after newer ones were read, was never learned by a
replica that kept running, though a replica started afterwards learned it. The running replica and a new one then
ranked the same request differently for as long as the running one lived."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cluster.cluster_support import Cluster, Replica, rows, split_replicas
from tests.database_link import DatabaseLink

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.model, pytest.mark.upstream]

TOOL = "echoer__echo"
CALL = {"name": TOOL, "arguments": {"text": "hi", "times": 1}}
LATE_SEARCH = "repeat these words back to me"  # searched on the cut-off replica, called on the other
LATE_CALL = "print the same text twice"  # searched on the other replica, called on the cut-off one
ON_TIME = "echo a message"  # searched and called on the other replica while the first is cut off


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[Cluster, str, DatabaseLink]]:
    with split_replicas(tmp_path) as replicas:
        yield replicas


async def _search(http: httpx.AsyncClient, replica: Replica, query: str) -> str:
    response = await http.post(f"{replica.url}/search", json={"query": query, "k": 10})
    assert response.status_code == 200, response.text
    return str(response.json()["search_id"])


async def _call(http: httpx.AsyncClient, replica: Replica, search_id: str) -> None:
    response = await http.post(f"{replica.url}/execute", json={**CALL, "search_id": search_id})
    assert response.status_code == 200, response.text


async def _usage(http: httpx.AsyncClient, replica: Replica, query: str) -> float:
    """The usage signal of the tool for this query on this replica (0 without one)."""
    response = await http.post(f"{replica.url}/search", json={"query": query, "k": 10, "explain": True})
    assert response.status_code == 200, response.text
    (result,) = [r for r in response.json()["results"] if r["name"] == TOOL]
    return float(result["explain"]["signals"].get("usage", 0.0))


async def _settled(http: httpx.AsyncClient, replicas: list[Replica], query: str, seconds: float) -> list[float]:
    """Each replica's usage value for the query once they agree (or the time is up)."""
    deadline = time.monotonic() + seconds
    while True:
        values = [await _usage(http, r, query) for r in replicas]
        if len(set(values)) == 1 or time.monotonic() > deadline:
            return values
        await asyncio.sleep(0.5)


async def test_a_call_and_its_search_written_out_of_order_teach_every_replica_alike(
    split: tuple[Cluster, str, DatabaseLink],
) -> None:
    cluster, url, link = split
    direct, cut_off = cluster.replicas
    async with httpx.AsyncClient(timeout=30) as http:
        await _call(http, cut_off, await _search(http, cut_off, "warm up"))  # the tool is in its caches
        late_call_search = await _search(http, direct, LATE_CALL)
        link.refuse()
        late_search = await _search(http, cut_off, LATE_SEARCH)  # spilled on r1
        await _call(http, direct, late_search)  # written now by r0, before its search row
        await _call(http, cut_off, late_call_search)  # spilled on r1, its search row written already
        await _call(http, direct, await _search(http, direct, ON_TIME))
        deadline = time.monotonic() + 20
        while await _usage(http, direct, ON_TIME) == 0.0:  # r0 has read past the call it could not join
            assert time.monotonic() < deadline, "r0 never learned the call of its own search"
            await asyncio.sleep(0.5)
        link.restore()
        deadline = time.monotonic() + 30
        query = "SELECT count(*) FROM searches WHERE id = :id"
        while not (await asyncio.to_thread(rows, url, query, id=late_search))[0][0]:
            assert time.monotonic() < deadline, "r1's spilled search row never reached the log"
            await asyncio.sleep(0.5)
        (fresh,) = await asyncio.to_thread(cluster.start, 1)  # reads the whole log at start
        everyone = [direct, cut_off, fresh]
        learned = {q: await _settled(http, everyone, q, 15) for q in (LATE_SEARCH, LATE_CALL, ON_TIME)}
    print({q: dict(zip(("r0", "r1", "r2"), v, strict=True)) for q, v in learned.items()})
    evidence = "SELECT count(*) FROM executions WHERE status = 'ok' AND search_id IS NOT NULL"
    assert (await asyncio.to_thread(rows, url, evidence))[0][0] == 4
    for query, values in learned.items():
        assert len(set(values)) == 1, f"the replicas learned {query!r} differently: {values}"
    # Each request was learned from itself (its own past query is the nearest, similarity 1): more than from the
    # others' queries, which is all a replica that missed it had.
    assert learned[LATE_SEARCH][0] > 0.0 and learned[LATE_CALL][0] > 0.0
