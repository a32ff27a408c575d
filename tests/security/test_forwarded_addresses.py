"""Whose X-Forwarded-For is believed: nobody's by default, so a process on loopback cannot pose as many clients and
slip past the per-client bounds; with `policy.trusted_proxies` naming the proxy, the address it forwards counts.
Real `toolscout serve` and `toolscout mcp --transport http` processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from service.cli import main
from tests.mcp.conftest import HEADERS, INITIALIZE, session_headers
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


def wrong_keys(url: str, forwarded: list[str], **credentials: str) -> list[tuple[int, str]]:
    """Status and detail of a request with a wrong key (or other `credentials` headers) from 127.0.0.1 claiming
    each forwarded address in turn."""
    answers = []
    with httpx.Client(timeout=30) as http:
        for address in forwarded:
            headers = credentials or {"Authorization": "Bearer tsk_wrong"}
            response = http.get(url, headers={**headers, "X-Forwarded-For": address})
            answers.append((response.status_code, response.json()["detail"]))
    return answers


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """A data folder holding one admin key (so the service asks every request for one), and that key."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    capsys.readouterr()
    assert main(["keys", "create", "--caller", "root", "--role", "admin", "--json"]) == 0
    return tmp_path, json.loads(capsys.readouterr().out)["key"]


def test_by_default_a_forwarded_address_from_loopback_is_not_believed(keyed: tuple[Path, str]) -> None:
    with toolscout(keyed[0], "serve") as url:
        answers = wrong_keys(f"{url}/tools", [f"10.9.9.{i}" for i in range(FREE + 2)])
    # Every claimed address is one client, 127.0.0.1: free wrong keys, then one that sets the wait, then 429.
    assert [status for status, _ in answers] == [401] * (FREE + 1) + [429]


def test_the_forwarded_address_counts_from_a_trusted_proxy(keyed: tuple[Path, str]) -> None:
    with toolscout(keyed[0], "serve", TOOLSCOUT_POLICY__TRUSTED_PROXIES='["127.0.0.1"]') as url:
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


def test_uvicorns_own_variable_is_not_believed(keyed: tuple[Path, str]) -> None:
    with toolscout(keyed[0], "serve", FORWARDED_ALLOW_IPS="*") as url:
        answers = wrong_keys(f"{url}/tools", [f"10.9.9.{i}" for i in range(FREE + 2)])
    assert [status for status, _ in answers] == [401] * (FREE + 1) + [429]
    log = next(keyed[0].glob("serve-*.log")).read_text()
    assert "FORWARDED_ALLOW_IPS is ignored" in log and "TOOLSCOUT_POLICY__TRUSTED_PROXIES" in log


CONSOLE = {"X-Toolscout-Console": "1"}  # the console page's header: only its requests may use the session cookie


@pytest.mark.parametrize(("trusted", "secure"), [(None, False), ('["127.0.0.1"]', True)])
def test_the_console_cookie_is_secure_behind_a_trusted_proxy_that_terminated_tls(
    keyed: tuple[Path, str], trusted: str | None, secure: bool
) -> None:
    """`console.cookie_secure=auto` follows the scheme, which only a trusted proxy's X-Forwarded-Proto changes."""
    env = {} if trusted is None else {"TOOLSCOUT_POLICY__TRUSTED_PROXIES": trusted}
    with toolscout(keyed[0], "serve", **env) as url, httpx.Client(base_url=url, timeout=30) as http:
        forwarded = {**CONSOLE, "X-Forwarded-Proto": "https", "X-Forwarded-For": "10.9.9.9"}
        signed_in = http.post("/console/api/session", json={"key": keyed[1]}, headers=forwarded)
    assert signed_in.status_code == 200, signed_in.text
    attributes = {part.strip().lower() for part in signed_in.headers["set-cookie"].split(";")[1:]}
    assert ("secure" in attributes) is secure, attributes


def test_forged_console_cookies_count_per_forwarded_address(keyed: tuple[Path, str]) -> None:
    """A forged session cookie is a failed authentication of the address a trusted proxy forwards."""
    forged = {**CONSOLE, "Cookie": "toolscout_console=forged"}
    with toolscout(keyed[0], "serve", TOOLSCOUT_POLICY__TRUSTED_PROXIES='["127.0.0.1"]') as url:
        spread = wrong_keys(f"{url}/console/api/me", [f"10.9.9.{i}" for i in range(FREE + 2)], **forged)
        same = wrong_keys(f"{url}/console/api/me", ["10.8.8.8"] * (FREE + 2), **forged)
    assert [status for status, _ in spread] == [401] * (FREE + 2)
    assert [status for status, _ in same] == [401] * (FREE + 1) + [429]
    assert same[-1][1].startswith("Too many failed authentications from this address")


MCP_HEADERS = {**HEADERS, "Authorization": "Bearer front-key"}


def open_session(http: httpx.Client, url: str, address: str) -> str:
    """An MCP session opened from 127.0.0.1 for the forwarded `address`."""
    opened = http.post(url, json=INITIALIZE, headers={**MCP_HEADERS, "X-Forwarded-For": address})
    assert opened.status_code == 200, opened.text
    return opened.headers["mcp-session-id"]


def ping(http: httpx.Client, url: str, session: str, address: str) -> int:
    """200 while the session is open, 404 once it was closed to make room (or to another address than its own)."""
    headers = {**MCP_HEADERS, **session_headers(session), "X-Forwarded-For": address}
    return http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers).status_code


@pytest.mark.parametrize(("trusted", "first_kept"), [(None, False), ('["127.0.0.1"]', True)])
def test_the_mcp_session_bound_is_kept_per_forwarded_client(
    tmp_path: Path, trusted: str | None, first_kept: bool
) -> None:
    """Two sessions per client: behind a trusted proxy each forwarded address holds its own two, so one client
    opening sessions closes only its own; otherwise every client is the proxy and closes the others' sessions."""
    env = {"TOOLSCOUT_FRONTEND__HTTP_API_KEY": "front-key", "TOOLSCOUT_FRONTEND__HTTP_MAX_SESSIONS_PER_CLIENT": "2"}
    if trusted is not None:
        env["TOOLSCOUT_POLICY__TRUSTED_PROXIES"] = trusted
    with toolscout(tmp_path, "mcp", "--transport", "http", **env) as url, httpx.Client(timeout=30) as http:
        first = [open_session(http, f"{url}/mcp", "10.0.0.1") for _ in range(2)]
        second = [open_session(http, f"{url}/mcp", "10.0.0.2") for _ in range(2)]
        owners = ["10.0.0.1"] * 2 + ["10.0.0.2"] * 2
        kept = [ping(http, f"{url}/mcp", session, owner) for session, owner in zip(first + second, owners, strict=True)]
        third = open_session(http, f"{url}/mcp", "10.0.0.1")  # the first client's third session
        owners.append("10.0.0.1")
        sessions = [*first, *second, third]
        after = [ping(http, f"{url}/mcp", session, owner) for session, owner in zip(sessions, owners, strict=True)]
    if first_kept:
        assert kept == [200] * 4
        assert after == [404, 200, 200, 200, 200]  # the first client's least recently used made room
    else:
        assert kept == [404, 404, 200, 200]
        assert after == [404, 404, 404, 200, 200]
