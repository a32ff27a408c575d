"""Whose X-Forwarded-For is believed: nobody's by default, so a process on loopback cannot pose as many clients and
slip past the per-client bounds; with `policy.trusted_proxies` naming the proxy, the address it forwards counts.
Real `toolscout serve` and `toolscout mcp --transport http` processes on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from service.cli import main
from tests.processes import free_port, stop_process, wait_for_port

REPO = Path(__file__).resolve().parents[2]
FREE = 5  # policy.auth_failures_free: the wrong keys an address gets before it must wait


@contextmanager
def toolscout(tmp_path: Path, *command: str, **env: str) -> Iterator[str]:
    """Run `toolscout COMMAND --port P` in a child process until it accepts connections (an HTTP probe would
    count as a failed authentication of 127.0.0.1)."""
    port = free_port()
    log = (tmp_path / f"{command[0]}-{port}.log").open("wb")
    child_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOOLSCOUT_DATA_DIR": str(tmp_path),
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        **env,
    }
    args = [sys.executable, "-m", "service.cli", *command, "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(args, env=child_env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, process, 120, f"toolscout {command[0]}", Path(log.name))
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)
        log.close()


def wrong_keys(url: str, forwarded: list[str]) -> list[tuple[int, str]]:
    """Status and detail of a request with a wrong key from 127.0.0.1 claiming each forwarded address in turn."""
    answers = []
    with httpx.Client(timeout=30) as http:
        for address in forwarded:
            response = http.get(url, headers={"Authorization": "Bearer tsk_wrong", "X-Forwarded-For": address})
            answers.append((response.status_code, response.json()["detail"]))
    return answers


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder holding one key, so the service asks every request for one."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "--caller", "root", "--role", "admin"]) == 0
    return tmp_path


def test_by_default_a_forwarded_address_from_loopback_is_not_believed(keyed: Path) -> None:
    with toolscout(keyed, "serve") as url:
        answers = wrong_keys(f"{url}/tools", [f"10.9.9.{i}" for i in range(FREE + 2)])
    # Every claimed address is one client, 127.0.0.1: free wrong keys, then one that sets the wait, then 429.
    assert [status for status, _ in answers] == [401] * (FREE + 1) + [429]


def test_the_forwarded_address_counts_from_a_trusted_proxy(keyed: Path) -> None:
    with toolscout(keyed, "serve", TOOLSCOUT_POLICY__TRUSTED_PROXIES='["127.0.0.1"]') as url:
        answers = wrong_keys(f"{url}/tools", [f"10.9.9.{i}" for i in range(FREE + 2)])
        assert [status for status, _ in answers] == [401] * (FREE + 2)
        # One forwarded address is still held to its bound.
        same = wrong_keys(f"{url}/tools", ["10.8.8.8"] * (FREE + 2))
        assert [status for status, _ in same] == [401] * (FREE + 1) + [429]


@pytest.mark.parametrize(
    ("trusted", "seen"), [(None, "127.0.0.1"), ('["127.0.0.1"]', "10.9.9.9"), ('["*"]', "10.9.9.9")]
)
def test_the_mcp_front_end_counts_the_same_client(tmp_path: Path, trusted: str | None, seen: str) -> None:
    env = {"TOOLSCOUT_FRONTEND__HTTP_API_KEY": "front-key"}
    if trusted is not None:
        env["TOOLSCOUT_POLICY__TRUSTED_PROXIES"] = trusted
    with toolscout(tmp_path, "mcp", "--transport", "http", **env) as url:
        answers = wrong_keys(f"{url}/mcp", ["10.9.9.9"] * (FREE + 2))
    assert [status for status, _ in answers] == [401] * (FREE + 1) + [429]
    assert answers[-1][1].startswith(f"Too many failed authentications from {seen};")


def test_uvicorns_own_variable_is_not_believed(keyed: Path) -> None:
    with toolscout(keyed, "serve", FORWARDED_ALLOW_IPS="*") as url:
        answers = wrong_keys(f"{url}/tools", [f"10.9.9.{i}" for i in range(FREE + 2)])
    assert [status for status, _ in answers] == [401] * (FREE + 1) + [429]
    log = next(keyed.glob("serve-*.log")).read_text()
    assert "FORWARDED_ALLOW_IPS is ignored" in log and "TOOLSCOUT_POLICY__TRUSTED_PROXIES" in log
