"""A replica cut off from the database answers calls (their rows spilled to the shared spill folder) and is killed
with SIGKILL before the database is back for it: another replica, which never lost its database, writes those rows.

Before, only a start or a replica's own outage replayed the shared folder: a replica that had no outage of its own
never looked, and the 30 calls the killed replica had answered were missing from the log 20 s later (and for as
long as no replica started)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cluster.chaos_support import logged_ids
from tests.cluster.cluster_support import Cluster, split_replicas
from tests.database_link import DatabaseLink

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.model, pytest.mark.upstream]

CALL = {"name": "echoer__echo", "arguments": {"text": "hi", "times": 1}}


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[Cluster, str, DatabaseLink]]:
    with split_replicas(tmp_path) as replicas:
        yield replicas


async def test_the_spill_of_a_replica_killed_during_its_own_outage_is_written_by_a_live_one(
    split: tuple[Cluster, str, DatabaseLink],
) -> None:
    cluster, url, link = split
    cut_off = cluster.replicas[1]
    async with httpx.AsyncClient(timeout=30) as http:
        warm = await http.post(f"{cut_off.url}/execute", json=CALL)  # the tool is in its cache
        assert warm.status_code == 200, warm.text
        link.refuse()
        answered = []
        for _ in range(30):
            response = await http.post(f"{cut_off.url}/execute", json=CALL)
            assert response.status_code == 200, response.text
            answered.append(response.json()["execution_id"])
    spill = cluster.tmp_path / "spill"
    assert any(p.name.endswith(".jsonl") and p.stat().st_size for p in spill.iterdir())  # on disk, not in the log
    assert cut_off.process is not None
    cut_off.process.send_signal(signal.SIGKILL)
    await asyncio.to_thread(cut_off.process.wait, 10)
    link.restore()  # nobody uses it any more: the killed replica is not started again

    deadline = time.monotonic() + 20
    while True:
        logged = await asyncio.to_thread(logged_ids, url)
        written = [i for i in answered if i in logged]
        if len(written) == len(answered) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    print(f"{len(written)} of {len(answered)} answered calls in the log")
    assert len(written) == len(answered)
    assert all(logged[i] == 1 for i in answered)
    assert [p.name for p in spill.iterdir() if p.name.endswith((".jsonl", ".replaying"))] == []
