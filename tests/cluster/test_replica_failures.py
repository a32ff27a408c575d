"""Replicas under failure lose nothing: during sustained `/execute` (mcp-server-time) and `/search` traffic the
replicas' PostgreSQL backends are terminated, the database goes away while a replica is stopped, Redis is
killed and started again, and a replica is killed with SIGKILL. Every call answered with a 2xx is in the
execution log exactly once and counted once by the statistics; every other answer is a 503 problem+json.

One cluster for the module: two replicas reaching PostgreSQL through a link the tests cut, on a redis-server of
their own."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy.engine import make_url

from service.upstream.demo import PYTHON_DEMO, ensure_python_packages
from tests.cluster.chaos_support import OwnRedis, Traffic, missing
from tests.cluster.cluster_support import BUSY_REPLICAS, Cluster, rows
from tests.conftest import POSTGRES_ADMIN_URL, fresh_database
from tests.database_link import DatabaseLink
from tests.upstream.upstream_support import toolchain_path

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.model, pytest.mark.upstream]

TRAFFIC_SECONDS = 4.0


@dataclass
class Chaos:
    cluster: Cluster
    database_url: str  # direct, not through the link
    link: DatabaseLink
    redis: OwnRedis


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    tmp = tmp_path_factory.mktemp("chaos")
    python = asyncio.run(
        ensure_python_packages(
            toolchain_path(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
        )
    )
    servers = tmp / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"time": {"command": python, "args": ["-m", "mcp_server_time"]}}}))
    link, redis = DatabaseLink(), OwnRedis(tmp / "redis")
    redis.start()
    with fresh_database() as url:
        env = {
            **BUSY_REPLICAS,
            # Shared buckets in Redis, large enough never to refuse the traffic.
            "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "1000000",
            "TOOLSCOUT_POLICY__RATE_LIMIT_BURST": "100000",
            "TOOLSCOUT_EXECUTION__SERVERS_FILE": str(servers),
            "TOOLSCOUT_CLUSTER__REDIS_URL": redis.url,
            "TOOLSCOUT_DB__TIMEOUT_SECONDS": "3",
            "TOOLSCOUT_EXECUTION__SHUTDOWN_GRACE_SECONDS": "3",
            # The logs' spill files on a folder every replica shares, as docker-compose.yml's spill volume.
            "TOOLSCOUT_DB__SPILL_DIR": str(tmp / "spill"),
        }
        group = Cluster(tmp, link.url(url), **env)
        try:
            group.start(2)
            yield Chaos(group, url, link, redis)
        finally:
            link.restore()
            group.stop()
            redis.stop()


def assert_nothing_lost(chaos: Chaos, traffic: Traffic) -> None:
    """Every 2xx call logged once and counted once; nothing but 2xx and 503 problem+json answered."""
    assert traffic.answered and len(set(traffic.answered)) == len(traffic.answered)
    assert traffic.server_errors() == []
    assert {status for _, status in traffic.statuses} <= {200, 503}, traffic.statuses
    assert missing(chaos.database_url, traffic.answered) == []
    query = "SELECT count(*), count(counted_at) FROM executions WHERE status = 'ok'"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ((ok, counted),) = rows(chaos.database_url, query)
        stats = rows(chaos.database_url, "SELECT successes FROM tool_stats WHERE tool = 'time__get_current_time'")
        if ok == counted and stats == [(ok,)]:
            break
        time.sleep(0.5)
    assert ok == counted and stats == [(ok,)], (ok, counted, stats)


async def run_traffic(chaos: Chaos, during: object) -> Traffic:
    """Traffic to the live replicas before, during (`during()`, a coroutine function) and after a failure."""
    traffic = Traffic(chaos.cluster.replicas, workers=4)
    task = asyncio.create_task(traffic.run())
    await asyncio.sleep(TRAFFIC_SECONDS)
    await during(traffic)  # type: ignore[operator]
    await asyncio.sleep(TRAFFIC_SECONDS)
    traffic.stop()
    await task
    return traffic


async def test_terminated_database_backends_cost_at_most_a_503(chaos: Chaos) -> None:
    database = make_url(chaos.database_url).database
    terminated = 0

    async def terminate(_: Traffic) -> None:
        nonlocal terminated
        query = (
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
        )
        for _ in range(8):
            terminated += len(await asyncio.to_thread(rows, POSTGRES_ADMIN_URL, query, name=database))
            await asyncio.sleep(0.3)

    traffic = await run_traffic(chaos, terminate)
    print(f"{terminated} backends terminated; answers {dict(traffic.statuses)}")
    assert terminated >= 8
    assert_nothing_lost(chaos, traffic)


async def test_calls_answered_while_the_database_is_down_are_written_though_their_replica_is_recreated_empty(
    chaos: Chaos,
) -> None:
    """The rows spilled while the database was away, and what a SIGTERM found pending, are replayed: the running
    replica's once the database is back, and the stopped one's by a live replica, though the stopped one comes back
    on an empty data folder (a container recreated: before the shared spill folder, 56 answered calls of such a run
    were never logged)."""
    stopped = chaos.cluster.replicas[1]
    answered_while_down = 0

    async def database_away(traffic: Traffic) -> None:
        nonlocal answered_while_down
        before = len(traffic.answered)
        chaos.link.refuse()
        await asyncio.sleep(3)
        traffic.down.add(stopped.name)
        assert stopped.process is not None
        stopped.process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(stopped.process.wait, 30)
        answered_while_down = len(traffic.answered) - before
        chaos.link.restore()

    try:
        traffic = await run_traffic(chaos, database_away)
    finally:
        chaos.link.restore()
    stopped.data_dir = chaos.cluster.tmp_path / f"{stopped.name}-recreated"
    stopped.data_dir.mkdir()
    stopped.log = stopped.data_dir / "serve.log"
    await asyncio.to_thread(chaos.cluster.restart, stopped)
    print(f"answered while the database was away: {answered_while_down}; answers {dict(traffic.statuses)}")
    assert answered_while_down > 0
    assert_nothing_lost(chaos, traffic)
    shared = chaos.cluster.tmp_path / "spill"
    assert [p.name for p in shared.iterdir() if p.name.endswith((".jsonl", ".replaying"))] == []


async def test_a_restarted_redis_costs_no_call_and_the_replicas_use_it_again(chaos: Chaos) -> None:
    a, b = chaos.cluster.replicas[:2]
    found_on_b: float | None = None
    back_after: float | None = None

    async def redis_away(_: Traffic) -> None:
        nonlocal found_on_b, back_after
        chaos.redis.stop()
        async with httpx.AsyncClient(timeout=10) as http:
            await asyncio.sleep(2.5)
            checks = (await http.get(f"{a.url}/readyz")).json()
            assert checks["status"] == "degraded" and checks["checks"]["redis"].startswith("degraded")
            tool = {"server": "calendar", "name": "create_event", "description": "Create a calendar event."}
            assert (await http.post(f"{a.url}/tools", json={"tools": [tool]})).status_code == 200
            registered = time.monotonic()
            exact = {"query": "calendar__create_event", "k": 1}
            while found_on_b is None and time.monotonic() - registered < 10:  # followed by polling
                found = (await http.post(f"{b.url}/search", json=exact)).json()["results"]
                if [r["name"] for r in found] == ["calendar__create_event"]:  # in b's name directory and index
                    found_on_b = time.monotonic() - registered
                await asyncio.sleep(0.1)
            await asyncio.to_thread(chaos.redis.start)
            restarted = time.monotonic()
            while back_after is None and time.monotonic() - restarted < 30:
                if all([(await http.get(f"{r.url}/readyz")).json()["status"] == "ready" for r in (a, b)]):
                    back_after = time.monotonic() - restarted
                await asyncio.sleep(0.2)

    traffic = await run_traffic(chaos, redis_away)
    print(f"without Redis: found on the other replica after {found_on_b} s; ready again {back_after} s after")
    assert found_on_b is not None and found_on_b < 5
    assert back_after is not None and back_after < 15
    assert traffic.statuses.keys() <= {("/execute", 200), ("/search", 200)}, traffic.statuses
    assert_nothing_lost(chaos, traffic)


async def test_a_sigterm_while_the_database_stalls_stops_the_replica_and_keeps_its_rows(chaos: Chaos) -> None:
    """A database that stops answering (the link forwards nothing, no reset): the replica stops within its bounds
    (it stayed up until SIGKILL before) and what it answered is written."""
    stopped = chaos.cluster.replicas[1]
    took: float | None = None

    async def stall(traffic: Traffic) -> None:
        nonlocal took
        chaos.link.hang()
        await asyncio.sleep(2)
        traffic.down.add(stopped.name)
        assert stopped.process is not None
        stopped.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        try:
            await asyncio.to_thread(stopped.process.wait, 60)
            took = time.monotonic() - started
        except subprocess.TimeoutExpired:
            stopped.process.kill()
            await asyncio.to_thread(stopped.process.wait, 10)
        chaos.link.restore()

    try:
        traffic = await run_traffic(chaos, stall)
    finally:
        chaos.link.restore()
    await asyncio.to_thread(chaos.cluster.restart, stopped)
    print(f"stopped {took} s after its SIGTERM; answers {dict(traffic.statuses)}")
    assert took is not None and took < 45
    assert_nothing_lost(chaos, traffic)


async def test_a_replica_killed_with_sigkill_loses_no_answered_call_and_holds_no_lock(chaos: Chaos) -> None:
    killed = chaos.cluster.replicas[1]

    async def kill(traffic: Traffic) -> None:
        assert killed.process is not None
        killed.process.send_signal(signal.SIGKILL)
        traffic.down.add(killed.name)
        await asyncio.to_thread(killed.process.wait, 10)

    traffic = await run_traffic(chaos, kill)
    assert_nothing_lost(chaos, traffic)
    # Its advisory locks (the upstream servers' writer turns) went with its connections.
    held = rows(
        chaos.database_url,
        "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()",
    )
    live = rows(chaos.database_url, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    assert {pid for pid, _ in held} <= {pid for (pid,) in live}
    await asyncio.to_thread(chaos.cluster.restart, killed)
    async with httpx.AsyncClient(timeout=30) as http:
        call = {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}
        assert (await http.post(f"{killed.url}/execute", json=call)).status_code == 200
