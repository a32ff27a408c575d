"""Crash safety of a real `toolscout serve` on PostgreSQL: kill -9 it while 200 /execute calls run, start it
again, and every call that was answered 200 has its executions row; no child process of the dead service
is left (its stdio server here runs under `sh`, so there is a grandchild too). And the start-up cleanup of
children left behind by a dead service, on its own."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from upstream_support import TEST_SERVER

from service.db.engine import sync_url
from service.upstream.children import ChildRegistry, process_info, wrap_command
from tests.processes import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.upstream]

CALLS = 200
KILL_AFTER = 60  # answered calls before the kill


def marked_processes(marker: str) -> list[int]:
    """Live processes whose command line holds the marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and process_info(int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


def start_service(data_dir: Path, database_url: str, servers_file: Path, port: int) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "TOOLSCOUT_DATA_DIR": str(data_dir),
        "TOOLSCOUT_DB__URL": database_url,
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__SERVERS_FILE": str(servers_file),
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
        "TOOLSCOUT_LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", str(port)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def wait_ready(client: httpx.AsyncClient, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = (process.stderr.read() if process.stderr else b"").decode(errors="replace")[-3000:]
            raise AssertionError(f"the service exited with code {process.returncode}: {error}")
        try:
            response = await client.get("/servers/t")
            if response.status_code == 200 and response.json()["health"]["state"] == "ready":
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError("the service did not get ready")


async def test_kill_9_during_200_calls_loses_no_answered_row_and_leaves_no_child(
    tmp_path: Path, postgres_url: str
) -> None:
    marker = f"toolscout-crash-{uuid.uuid4().hex}"
    servers_file = tmp_path / "servers.json"
    script = f'"{sys.executable}" "{TEST_SERVER}" stdio {marker}; exit $?'
    servers_file.write_text(json.dumps({"mcpServers": {"t": {"command": "sh", "args": ["-c", script]}}}))
    port = free_port()
    limits = httpx.Limits(max_connections=CALLS, max_keepalive_connections=CALLS)
    service = start_service(tmp_path / "data", postgres_url, servers_file, port)
    answered: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits) as client:
            await wait_ready(client, service)
            children = marked_processes(marker)
            assert len(children) == 2  # sh and the Python server under it
            killed = asyncio.Event()

            async def call(i: int) -> None:
                try:
                    response = await client.post(
                        "/execute", json={"name": "t__sleep", "arguments": {"seconds": 0.01 * (i % 20)}}
                    )
                except httpx.HTTPError:
                    return  # the service died under this call
                if response.status_code == 200:
                    answered.append(response.json()["execution_id"])
                    if len(answered) >= KILL_AFTER and not killed.is_set():
                        killed.set()
                        os.kill(service.pid, signal.SIGKILL)

            await asyncio.gather(*(call(i) for i in range(CALLS)))
        service.wait(10)
        assert killed.is_set() and KILL_AFTER <= len(answered) < CALLS
        # The children die with the service (PDEATHSIG; the grandchild sees its stdin close).
        deadline = time.monotonic() + 10
        while marked_processes(marker) and time.monotonic() < deadline:  # noqa: ASYNC110 - polling /proc
            await asyncio.sleep(0.1)
        assert marked_processes(marker) == []
        service = start_service(tmp_path / "data", postgres_url, servers_file, port)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            await wait_ready(client, service)
            after = await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "back"}})
            assert after.status_code == 200 and after.json()["content"][0]["text"] == "back"
        assert len(marked_processes(marker)) == 2  # the new service's children only
    finally:
        service.kill()
        service.wait(10)
    engine = sa.create_engine(sync_url(postgres_url))
    try:
        with engine.connect() as connection:
            stored = set(connection.execute(sa.text("SELECT id FROM executions")).scalars())
    finally:
        engine.dispose()
    missing = [i for i in answered if i not in stored]
    assert missing == [], f"{len(missing)} of {len(answered)} answered calls have no row"


def test_a_start_kills_the_children_a_dead_service_left(tmp_path: Path) -> None:
    folder = tmp_path / "children"
    # A "dead service": a process that has exited; its record names a child group still running.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60; wait"], start_new_session=True)
    time.sleep(0.3)
    info = process_info(leader.pid)
    assert info is not None
    folder.mkdir()
    (folder / f"{dead.pid}.json").write_text(
        json.dumps({"pid": dead.pid, "start": 1, "children": {str(leader.pid): info[1]}})
    )
    # A live service's record (this test process) is left alone.
    alive = ChildRegistry(folder)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    alive.add(bystander.pid)
    try:
        killed = ChildRegistry(folder).clean_up_after_dead_services()
        leader.wait(5)
        assert killed == 3  # sh and its two sleeps
        assert not (folder / f"{dead.pid}.json").exists() and alive.path.exists()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        leader.kill()


def test_a_wrapped_child_dies_with_its_parent(tmp_path: Path) -> None:
    marker = f"toolscout-orphan-{uuid.uuid4().hex}"
    # A parent that starts a wrapped child, reports its pid, then is killed with SIGKILL.
    code = (
        "import os, subprocess, sys, time\n"
        "from service.upstream.children import wrap_command\n"
        "argv = wrap_command('sh', ['-c', 'sleep 60; exit 0', os.environ['MARKER']])\n"
        "child = subprocess.Popen(argv, start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=os.environ | {"MARKER": marker})
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 5
    while not marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marked_processes(marker) == [child]  # the wrapper became the program: same pid
    parent.kill()
    parent.wait(5)
    deadline = time.monotonic() + 5
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marked_processes(marker) == []
    assert wrap_command("x", ["y"])[-2:] == ["x", "y"]
