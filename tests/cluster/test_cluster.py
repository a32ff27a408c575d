"""Several `toolscout serve` replicas on one PostgreSQL database and one Redis behave as one service.

Run separately in CI: `pytest -m cluster`. Each test module gets its own database and Redis key prefix."""

from __future__ import annotations

import ast
import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.cluster_support import BUSY_REPLICAS, Cluster, Replica
from tests.conftest import fresh_database
from tests.upstream.upstream_support import TEST_SERVER

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.model, pytest.mark.upstream]

DISTRACTORS = [
    {"server": "files", "name": "read_file", "description": "Read the contents of a file from disk."},
    {"server": "files", "name": "list_directory", "description": "List the files and folders in a directory."},
    {"server": "git", "name": "git_commit", "description": "Record staged changes to the repository with a message."},
    {"server": "mail", "name": "send_email", "description": "Send an email message to a recipient."},
]
FORECAST = {
    "server": "weather",
    "name": "get_forecast",
    "description": "Get the weather forecast for a city: temperature, rain and wind for the coming days.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two replicas, no rate limit, statistics refreshed every second."""
    with fresh_database() as url:
        group = Cluster(tmp_path_factory.mktemp("cluster"), url, **BUSY_REPLICAS)
        try:
            group.start(2)
            yield group
        finally:
            group.stop()


async def _top(http: httpx.AsyncClient, replica: Replica, query: str, k: int = 3) -> list[str]:
    response = await http.post(f"{replica.url}/search", json={"query": query, "k": k})
    assert response.status_code == 200, response.text
    return [r["name"] for r in response.json()["results"]]


async def test_a_tool_registered_on_one_replica_is_found_on_another_within_a_second(cluster: Cluster) -> None:
    a, b = cluster.replicas[:2]
    async with httpx.AsyncClient(timeout=60) as http:
        assert (await http.post(f"{a.url}/tools", json={"tools": DISTRACTORS})).status_code == 200
        for replica in (a, b):  # loads the model on both replicas before the clock starts
            for query in ("warm up", "a second query", "a third one"):
                await _top(http, replica, query)
        registered = await http.post(f"{a.url}/tools", json={"tools": [FORECAST]})
        assert registered.json()["created"] == 1
        started = time.monotonic()
        exact_after = meaning_after = None
        while time.monotonic() - started < 10 and (exact_after is None or meaning_after is None):
            # Timed when the search is sent: a search takes 50-1000 ms on a busy 2-core machine by itself.
            sent = time.monotonic() - started
            if exact_after is None and (await _top(http, b, "get_forecast", 1)) == ["weather__get_forecast"]:
                exact_after = sent
            sent = time.monotonic() - started
            if meaning_after is None and "weather__get_forecast" in await _top(http, b, "will it rain in Paris?"):
                meaning_after = sent
            await asyncio.sleep(0.02)
        detail = (await http.get(f"{b.url}/tools/weather__get_forecast")).json()
    print(f"found on the other replica after: exact name {exact_after} s, meaning {meaning_after} s")
    assert exact_after is not None and exact_after < 1.0
    assert meaning_after is not None and meaning_after < 1.0
    assert detail["description"] == FORECAST["description"]


async def test_an_events_subscriber_on_one_replica_sees_changes_made_on_another(cluster: Cluster) -> None:
    a, b = cluster.replicas[:2]
    received: list[dict[str, Any]] = []

    async def follow(http: httpx.AsyncClient, connected: asyncio.Event) -> None:
        async with http.stream("GET", f"{b.url}/events") as stream:
            event = None
            async for line in stream.aiter_lines():
                if line.startswith(": connected"):
                    connected.set()
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "tools_changed":
                    received.append(json.loads(line[6:]))
                    if received[-1]["server"] == "calendar":
                        return

    async with httpx.AsyncClient(timeout=60) as http:
        connected = asyncio.Event()
        task = asyncio.create_task(follow(http, connected))
        await asyncio.wait_for(connected.wait(), 10)
        tool = {"server": "calendar", "name": "create_event", "description": "Create a calendar event."}
        assert (await http.post(f"{a.url}/tools", json={"tools": [tool]})).status_code == 200
        await asyncio.wait_for(task, 5)
    assert {"server": "calendar"} in received


async def test_a_server_added_on_one_replica_is_callable_on_another_and_removed_everywhere(cluster: Cluster) -> None:
    a, b = cluster.replicas[:2]
    entry = {"id": "echoer", "command": sys.executable, "args": [str(TEST_SERVER), "stdio"]}
    async with httpx.AsyncClient(timeout=60) as http:
        added = await http.post(f"{a.url}/servers", json=entry)
        assert added.status_code == 201, added.text
        call = {"name": "echoer__echo", "arguments": {"text": "hi", "times": 2}}
        deadline = time.monotonic() + 30
        while True:
            response = await http.post(f"{b.url}/execute", json=call)
            if response.status_code == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert response.status_code == 200, response.text
        assert response.json()["content"] == [{"type": "text", "text": "hi hi"}]
        servers_b = {s["id"]: s for s in (await http.get(f"{b.url}/servers")).json()["servers"]}
        assert servers_b["echoer"]["state"] == "ready" and servers_b["echoer"]["health"]["pid"] > 0

        # Executions spread over both replicas are each counted once (the successes: b's first attempts,
        # before it had connected the new server, are logged failures).
        calls = [http.post(f"{r.url}/execute", json=call) for r in (a, b) * 10]
        assert all(r.status_code == 200 for r in await asyncio.gather(*calls))
        counted = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            usage = (await http.get(f"{a.url}/analytics/tools", params={"tool": "echoer__echo"})).json()["tools"]
            counted = usage[0]["successes"] if usage else 0
            if counted >= 21:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.5)  # both replicas' refresh loops ran again: nothing is counted twice
        usage = (await http.get(f"{b.url}/analytics/tools", params={"tool": "echoer__echo"})).json()["tools"]
        assert counted == 21 and usage[0]["successes"] == 21

        removed = await http.delete(f"{a.url}/servers/echoer")
        assert removed.status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            gone = await http.post(f"{b.url}/execute", json=call)
            ids_b = {s["id"] for s in (await http.get(f"{b.url}/servers")).json()["servers"]}
            if gone.status_code == 404 and "echoer" not in ids_b:
                break
            await asyncio.sleep(0.2)
        assert gone.status_code == 404 and "echoer" not in ids_b
        await asyncio.sleep(2)  # the other replica's connection is gone and brought no row back
        ids_a = {s["id"] for s in (await http.get(f"{a.url}/servers")).json()["servers"]}
        assert "echoer" not in ids_a


def test_a_new_replica_embeds_nothing(cluster: Cluster) -> None:
    (c,) = cluster.start(1)
    log = c.log_text()
    assert "index reconciled with the catalog" in log
    reconciled = log.split("index reconciled with the catalog: ", 1)[1].split("\n", 1)[0]
    report = ast.literal_eval(reconciled)
    assert report["embedded"] == 0 and report["upserted"] >= len(DISTRACTORS) + 1, report
    assert httpx.get(f"{c.url}/tools/weather__get_forecast", timeout=10).status_code == 200


def test_a_rate_limit_holds_across_all_replicas_together(tmp_path: Path) -> None:
    with fresh_database() as url:
        group = Cluster(
            tmp_path, url, TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE="6", TOOLSCOUT_POLICY__RATE_LIMIT_BURST="6"
        )
        try:
            group.start(2)
            # Readiness probes take no tokens; every other request does, from one shared bucket.
            codes = [httpx.get(f"{r.url}/tools", timeout=10).status_code for r in group.replicas * 6]
            assert sorted(codes) == [200] * 6 + [429] * 6, codes
            limited = httpx.get(f"{group.replicas[0].url}/tools", timeout=10)
            assert limited.status_code == 429 and float(limited.headers["retry-after"]) > 0
        finally:
            group.stop()
