"""A real `toolscout serve` for the console tests: the demo catalog, the test MCP server as `t`, a permissions
file making `t__big` destructive, and a few hundred executions seeded into the log over the last hours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, insert

from service.db.engine import upgrade_database
from service.db.models import Execution, Search
from tests.processes import free_port, stop_process

REPO = Path(__file__).resolve().parents[2]
TEST_SERVER = REPO / "tests" / "upstream" / "mcp_test_server.py"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Seeded calls per hour ago (1..12), tool and duration: exact counts the charts must show.
SEEDED_TOOLS = [
    ("time__get_current_time", "time", 4.0),
    ("git__git_status", "git", 40.0),
    ("fetch__fetch", "fetch", 300.0),
]
ZERO_RESULT_QUERIES = {"teleport me to mars": 6, "brew a coffee": 4}
# Calls just outside the console's windows: slow ones in the hour 24 hours back (the 24-hour window is the
# current hour and the 23 before it), and a caller last active on the day 30 days back (the 30-day window is the
# current UTC day and the 29 before it). Both are inside the API's default window (30 days back, floored).
DAY_OLD_CALLS = (3, "time__get_current_time", "time", 5000.0)
MONTH_OLD_CALLS = (2, "git__git_status", "git", "retired-agent")


@dataclass
class Live:
    """The running service and what was put into it."""

    url: str
    admin_key: str
    agent_key: str
    per_hour: dict[str, int] = field(default_factory=dict)  # bucket label -> calls
    failures: int = 0
    calls: int = 0  # every call logged, those outside the console's windows included
    outside_24h: int = 0  # calls older than the 24-hour window's first hour
    outside_30d: int = 0  # calls older than the 30-day window's first day
    searches: int = 0
    followed: int = 0
    followed_ok: int = 0
    approval_id: str = ""
    database_url: str = ""

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def hour_label(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:00:00Z")


def seed(database_url: str, live: Live) -> None:
    """Executions and searches of the last 12 hours, and a few calls just outside the console's 24-hour and 30-day
    windows, written straight into the log before the service starts."""
    upgrade_database(database_url)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    executions: list[dict[str, Any]] = []
    searches: list[dict[str, Any]] = []
    for hours_ago in range(1, 13):
        moment = now - timedelta(hours=hours_ago) + timedelta(minutes=10)
        count = 10 + 2 * hours_ago
        live.per_hour[hour_label(moment)] = count
        for i in range(count):
            tool, server, duration = SEEDED_TOOLS[i % len(SEEDED_TOOLS)]
            status = "tool_error" if i % 7 == 6 else "ok"
            search_id = None
            if i % 5 == 0:  # every fifth call came from a search
                search_id = str(uuid.uuid4())
                # the searcher makes the call: only its own call marks a search followed
                searches.append(_search(search_id, "what is the time", moment, 3, caller=f"agent-{i % 3}"))
                live.followed += 1
                live.followed_ok += status == "ok"
            live.failures += status != "ok"
            executions.append(
                _call(tool, server, f"agent-{i % 3}", moment + timedelta(seconds=i), duration, status, search_id)
            )
    count, tool, server, duration = DAY_OLD_CALLS
    day_old = now - timedelta(hours=24) + timedelta(minutes=10)
    executions.extend(_call(tool, server, "agent-0", day_old, duration) for _ in range(count))
    live.outside_24h += count
    count, tool, server, caller = MONTH_OLD_CALLS
    month_old = now - timedelta(days=30) + timedelta(minutes=10)
    executions.extend(_call(tool, server, caller, month_old, 10.0) for _ in range(count))
    live.outside_24h += count
    live.outside_30d += count
    for query, times in ZERO_RESULT_QUERIES.items():
        searches.extend(_search(str(uuid.uuid4()), query, now - timedelta(hours=2), 0) for _ in range(times))
    live.calls, live.searches = len(executions), len(searches)
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(insert(Execution), executions)
        connection.execute(insert(Search), searches)
    engine.dispose()


def _call(
    tool: str,
    server: str,
    caller: str,
    started: datetime,
    duration: float,
    status: str = "ok",
    search_id: str | None = None,
) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "caller": caller,
        "tool": tool,
        "server_id": server,
        "search_id": search_id,
        "arguments_digest": "0" * 64,
        "status": status,
        "duration_ms": duration,
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=duration),
    }


def _search(search_id: str, query: str, moment: datetime, results: int, caller: str = "agent-0") -> dict[str, Any]:
    found = [{"name": "time__get_current_time", "score": 1.0}] * results
    return {
        "id": search_id,
        "caller": caller,
        "query": query,
        "k": 5,
        "results": found,
        "result_count": results,
        "latency_ms": 12.0,
        "created_at": moment,
    }


def wait_for(check: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = check()
            if value:
                return value
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.3)


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """`toolscout serve` on a free port, with keys for an admin and an agent, seeded and warmed."""
    data = tmp_path_factory.mktemp("console")
    (data / "servers.json").write_text(
        json.dumps({"mcpServers": {"t": {"command": sys.executable, "args": [str(TEST_SERVER)]}}})
    )
    (data / "permissions.yaml").write_text(
        "roles:\n  default:\n    allow: ['*']\n  jailed:\n    deny: ['*']\n"
        "approver_roles: [approver, admin]\ndestructive: ['t__big']\n"
    )
    port = free_port()
    live = Live(f"http://127.0.0.1:{port}", "", "")
    live.database_url = f"sqlite:///{data / 'toolscout.db'}"
    seed(live.database_url, live)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOOLSCOUT_DATA_DIR": str(data),
        "TOOLSCOUT_EXECUTION__SERVERS_FILE": str(data / "servers.json"),
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "TOOLSCOUT_POLICY__PERMISSIONS_FILE": str(data / "permissions.yaml"),
        "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
        # The session's tests sign in with wrong keys from one address, and a valid key forgets no failure
        # (service/security/auth_failures.py, tested in tests/security/test_rate_limits.py): never slowed here.
        "TOOLSCOUT_POLICY__AUTH_FAILURES_FREE": "1000",
        "TOOLSCOUT_LEARNING__REFRESH_SECONDS": "1",
        "TOOLSCOUT_LEARNING__REFRESH_LAG_SECONDS": "0",
        "TOOLSCOUT_POLICY__KEY_CACHE_SECONDS": "0",
    }
    toolscout = str(Path(sys.executable).with_name("toolscout"))
    # The first admin key the CLI's way: POST /keys needs an admin key even in open mode.
    created = subprocess.run(
        [toolscout, "keys", "create", "--caller", "ops", "--role", "admin", "--json"],
        env=env,
        cwd=data,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    live.admin_key = json.loads(created.stdout)["key"]
    command = [toolscout, "serve", "--host", "127.0.0.1", "--port", str(port)]
    log = (data / "serve.log").open("wb")
    process = subprocess.Popen(command, env=env, cwd=data, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: httpx.get(live.url + "/readyz").status_code == 200, 240, "the service")
        with live.client(live.admin_key) as admin:
            wait_for(lambda: admin.get("/servers/t").json().get("state") == "ready", 60, "server t")
            live.agent_key = admin.post("/keys", json={"caller": "agent", "roles": []}).json()["key"]
        make_live_calls(live)
        expected = (live.calls, live.searches)
        with live.client(live.admin_key) as admin:

            def folded() -> bool:
                series = admin.get("/analytics/timeseries").json()["series"]
                return (sum(b["calls"] for b in series), sum(b["searches"] for b in series)) == expected

            wait_for(folded, 60, "the rollups")
        yield live
    finally:
        stop_process(process)
        log.close()


def make_live_calls(live: Live) -> None:
    """Calls of the current hour by the agent: echoes, tool errors, one destructive call left pending."""
    with live.client(live.agent_key) as agent:
        for i in range(5):
            search = agent.post("/search", json={"query": f"echo the text number {i} back", "k": 3}).json()
            live.searches += 1
            echo = agent.post(
                "/execute", json={"name": "t__echo", "arguments": {"text": str(i)}, "search_id": search["search_id"]}
            )
            assert echo.status_code == 200, echo.text
            live.followed += 1
            live.followed_ok += 1
        for i in range(25):
            assert (
                agent.post("/execute", json={"name": "t__echo", "arguments": {"text": f"x{i}", "times": 2}}).status_code
                == 200
            )
        for _ in range(4):
            assert agent.post("/execute", json={"name": "t__fail", "arguments": {}}).json()["status"] == "tool_error"
        pending = agent.post("/execute", json={"name": "t__big", "arguments": {"lines": 3}})
        assert pending.status_code == 403, pending.text
        live.approval_id = pending.json()["approval_id"]
    live.calls += 5 + 25 + 4 + 1
    live.failures += 4 + 1  # the refused call counts as a failure in the hourly series (every outcome but ok)
    live.per_hour[hour_label(datetime.now(UTC))] = 5 + 25 + 4 + 1
