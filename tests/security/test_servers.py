"""Who may run what: stdio over the API, ${VAR} expansion, internal upstream URLs and what /servers shows."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.db.models import Server
from service.execution.runtime import get_gateway
from tests.security.conftest import (
    assert_problem,
    bearer,
    cli_key,
    count_rows,
    make_settings,
    probe_entry,
    running,
    servers_file,
)

SECRET = "s3cr3t-token-value-42"


def shell_attack(marker: Path) -> dict[str, Any]:
    return {"id": "pwn", "command": "sh", "args": ["-c", f"touch {marker}"]}


async def test_stdio_over_the_api_is_refused_by_default_even_for_admins(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        body = assert_problem(await http.post("/servers", json=shell_attack(marker), headers=bearer(admin)), 403)
        assert "execution.allow_api_stdio" in body["detail"]
        mcp_servers = {"mcpServers": {"pwn": {"command": "sh", "args": ["-c", f"touch {marker}"]}}}
        assert_problem(await http.post("/servers", json=mcp_servers, headers=bearer(admin)), 403)
        assert not marker.exists()
        assert await count_rows(app, Server) == 0
        listed = (await http.get("/servers", headers=bearer(admin))).json()["servers"]
        assert listed == []


async def test_open_mode_cannot_register_a_shell_either(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        assert_problem(await http.post("/servers", json=shell_attack(marker)), 403)
        assert not marker.exists()
        assert await count_rows(app, Server) == 0


async def test_allowed_api_stdio_runs_only_listed_commands(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    execution = {"allow_api_stdio": True, "api_stdio_commands": [sys.executable]}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        body = assert_problem(await http.post("/servers", json=shell_attack(marker), headers=bearer(admin)), 403)
        assert "execution.api_stdio_commands" in body["detail"]
        assert not marker.exists()
        assert await count_rows(app, Server) == 0
        added = await http.post("/servers", json={"id": "probe", **probe_entry()}, headers=bearer(admin))
        assert added.status_code == 201, added.text


async def test_an_allowed_api_stdio_command_takes_only_listed_environment_variables(tmp_path: Path) -> None:
    # One harmless server allowed by its path: PYTHONWARNINGS made it import antigravity, which ran $BROWSER (a
    # shell command) as the service's user. NODE_OPTIONS, LD_PRELOAD and PATH are as good to an attacker.
    server = tmp_path / "mcp-server-probe"
    server.write_text(
        f"#!{sys.executable}\nimport runpy, sys\nsys.argv = [{probe_entry()['args'][0]!r}, 'stdio']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    server.chmod(0o755)
    marker = tmp_path / "pwned"
    hostile = {"PYTHONWARNINGS": "ignore::antigravity.Foo", "BROWSER": f"/bin/sh -c 'touch {marker}' #%s"}
    execution = {
        "allow_api_stdio": True,
        "api_stdio_commands": [str(server)],
        "api_stdio_env": ["API_TOKEN"],
        "startup_wait_seconds": 60,
    }
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        entry = {"id": "probe", "command": str(server), "env": {"API_TOKEN": "t", **hostile}}
        body = assert_problem(await http.post("/servers", json=entry, headers=bearer(admin)), 403)
        assert "execution.api_stdio_env" in body["detail"] and body["variables"] == ["BROWSER", "PYTHONWARNINGS"]
        await asyncio.sleep(1)  # the hostile child would have run by now
        assert not marker.exists()
        assert await count_rows(app, Server) == 0
        listed = {"id": "probe", "command": str(server), "env": {"API_TOKEN": "t"}}
        added = await http.post("/servers", json=listed, headers=bearer(admin))
        assert added.status_code == 201 and added.json()["health"]["state"] == "ready", added.text


HEADER_SECRET = {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${env:TOOLSCOUT_TEST_SECRET}"}}


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"id": "leak", "url": "https://example.com/${TOOLSCOUT_TEST_SECRET}"}, "/body/url"),
        ({"id": "leak", **HEADER_SECRET}, "/body/headers/Authorization"),
        ({"mcpServers": {"leak/1": HEADER_SECRET}}, "/body/mcpServers/leak~11/headers/Authorization"),
    ],
)
async def test_variables_are_not_expanded_for_api_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], pointer: str
) -> None:
    monkeypatch.setenv("TOOLSCOUT_TEST_SECRET", SECRET)
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        response = await http.post("/servers", json=body, headers=bearer(admin))
        problem = assert_problem(response, 422)
        assert "${" in problem["detail"] and SECRET not in response.text
        assert [error["pointer"] for error in problem["errors"]] == [pointer]
        assert await count_rows(app, Server) == 0


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"id": "bad", "url": "ftp://example"}, "/body/url"),
        ({"id": "bad", "url": "http://10.0.0.1/mcp"}, "/body/url"),
        ({"mcpServers": {"bad": {"url": "http://10.0.0.1/mcp"}}}, "/body/mcpServers/bad/url"),
        ({"mcpServers": {"bad": {"url": "http://h/mcp", "timeout": -1}}}, "/body/mcpServers/bad/timeout"),
        ({"mcpServers": {"a": {"url": "http://h/a"}, "b": {"url": "http://h/b"}}}, "/body/mcpServers"),
        ({"url": "http://h/mcp"}, "/body/id"),
        # A misspelt field added the server without what it holds (its credentials here), and no one heard of it.
        ({"id": "docs", "url": "https://mcp.example.com/mcp", "headerz": {"A": "b"}}, "/body/headerz"),
        ({"mcpServers": {"docs": {"url": "https://h.example/mcp", "hedaers": {}}}}, "/body/mcpServers/docs/hedaers"),
    ],
)
async def test_a_refused_server_entry_points_into_the_body(
    tmp_path: Path, body: dict[str, Any], pointer: str
) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        problem = assert_problem(await http.post("/servers", json=body, headers=bearer(admin)), 422)
        assert [error["pointer"] for error in problem["errors"]] == [pointer], problem
        assert await count_rows(app, Server) == 0


@pytest.fixture
def listener() -> Iterator[tuple[int, list[Any]]]:
    """A real TCP listener on loopback that records every connection made to it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.settimeout(0.2)
    accepted: list[Any] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            accepted.append(conn)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(2)
        sock.close()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/mcp",
        "http://localhost:{port}/mcp",
        "http://[::ffff:127.0.0.1]:{port}/mcp",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/mcp",
    ],
)
async def test_internal_upstream_urls_are_refused_and_never_contacted(
    tmp_path: Path, listener: tuple[int, list[Any]], url: str
) -> None:
    port, accepted = listener
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        target = url.format(port=port)
        response = await http.post("/servers", json={"id": "inside", "url": target}, headers=bearer(admin))
        body = assert_problem(response, 422)
        assert "internal address" in body["detail"] and "execution.upstream_allowed_hosts" in body["detail"]
        assert await count_rows(app, Server) == 0
    assert accepted == []


async def test_allowed_internal_upstream_is_contacted(tmp_path: Path, listener: tuple[int, list[Any]]) -> None:
    port, accepted = listener
    execution = {"upstream_allowed_hosts": ["127.0.0.0/8"], "startup_wait_seconds": 2.0}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        url = f"http://127.0.0.1:{port}/mcp"
        response = await http.post("/servers", json={"id": "inside", "url": url}, headers=bearer(admin))
        assert response.status_code == 502  # not an MCP server, but the guard let it through
    assert accepted


async def test_servers_need_a_key(tmp_path: Path) -> None:
    path = servers_file(tmp_path, {"public": probe_entry()})
    settings = make_settings(tmp_path, execution={"servers_file": path, "startup_wait_seconds": 60})
    async with running(settings) as (app, http):
        await cli_key(app, "root", ["admin"])
        for route in ("/servers", "/servers/public"):
            response = await http.get(route)
            assert_problem(response, 401, "unauthorized")
            assert "public" not in response.json()["detail"]


async def test_non_admins_see_only_their_servers_redacted(tmp_path: Path) -> None:
    env = {"API_TOKEN": SECRET}
    path = servers_file(tmp_path, {"public": probe_entry(env=env), "vault": probe_entry(env=env)})
    settings = make_settings(tmp_path, execution={"servers_file": path, "startup_wait_seconds": 60})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        dev = await cli_key(app, "dev-agent", ["dev"])
        every = (await http.get("/servers", headers=bearer(admin))).json()["servers"]
        assert {s["id"] for s in every} == {"public", "vault"}
        response = await http.get("/servers", headers=bearer(dev))
        assert response.status_code == 200
        servers = response.json()["servers"]
        assert [s["id"] for s in servers] == ["public"]
        text = response.text
        for leaked in (sys.executable, "mcp_test_server", "API_TOKEN", SECRET, '"pid"', "stderr", "vault"):
            assert leaked not in text, leaked
        assert servers[0]["state"] == "ready" and servers[0]["tools"] > 0
        hidden = await http.get("/servers/vault", headers=bearer(dev))
        missing = await http.get("/servers/nowhere", headers=bearer(dev))
        assert_problem(hidden, 404)
        assert hidden.json()["detail"].replace("vault", "X") == missing.json()["detail"].replace("nowhere", "X")


async def test_child_stderr_is_scrubbed_of_configured_secrets(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    talker = tmp_path / "talker.py"
    talker.write_text("import os, sys\nsys.stderr.write('token is ' + os.environ['API_TOKEN'] + '\\n')\nsys.exit(3)\n")
    entry = {"command": sys.executable, "args": [str(talker)], "env": {"API_TOKEN": SECRET}}
    settings = make_settings(
        tmp_path, permissions=None, execution={"servers_file": servers_file(tmp_path, {"talker": entry})}
    )
    settings.execution.startup_wait_seconds = 10
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        view = await http.get("/servers/talker", headers=bearer(admin))
        assert view.status_code == 200
        assert "token is ***" in view.text
        assert SECRET not in view.text
    assert SECRET not in caplog.text


async def test_an_api_stdio_server_stored_earlier_does_not_start_once_disallowed(tmp_path: Path) -> None:
    allowed = {"allow_api_stdio": True, "api_stdio_commands": [sys.executable], "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, permissions=None, execution=allowed)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        added = await http.post("/servers", json={"id": "probe", **probe_entry()}, headers=bearer(admin))
        assert added.status_code == 201 and added.json()["health"]["pid"] > 0
    execution = {"startup_wait_seconds": 10}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        view = (await http.get("/servers/probe", headers=bearer(admin))).json()
        assert view["state"] == "backoff" and view["health"]["pid"] is None
        assert "execution.allow_api_stdio" in view["health"]["last_error"]


async def test_a_server_flooding_its_pipes_without_newlines_costs_linear_time_and_bounded_memory(
    tmp_path: Path,
) -> None:
    # 40 MB on stderr and 40 MB on stdout, each one line, before the server answers: the reader joined the line so
    # far to each 64 KB chunk (quadratic: ~10 s of the event loop each), and stderr's line grew without bound.
    flood = tmp_path / "flood.py"
    flood.write_text(
        "import runpy, sys\n"
        "sys.stderr.write('progress ' + 'x' * 40_000_000 + '\\n'); sys.stderr.flush()\n"
        "sys.stdout.write('y' * 40_000_000 + '\\n'); sys.stdout.flush()\n"
        f"sys.argv = [{str(probe_entry()['args'][0])!r}, 'stdio']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    entry = {"command": sys.executable, "args": [str(flood)]}
    settings = make_settings(
        tmp_path, permissions=None, execution={"servers_file": servers_file(tmp_path, {"f": entry})}
    )
    settings.execution.startup_wait_seconds = 60
    settings.execution.max_message_bytes = 64_000_000  # the junk line is under the bound of one message
    started = time.perf_counter()
    async with running(settings) as (app, http):
        answer = await http.post("/execute", json={"name": "f__echo", "arguments": {"text": "hi"}})
        assert answer.status_code == 200, answer.text
        assert answer.json()["content"] == [{"type": "text", "text": "hi"}]
        assert time.perf_counter() - started < 8
        stderr = get_gateway(app.state.resources).pool.get("f")._child.stderr  # noqa: SLF001 - what /servers tails
        assert [len(line) for line in stderr if line.startswith("progress")] == [500]


@pytest.mark.parametrize(
    ("entry", "pointer"),
    [
        ({"args": ["-c", "pass\x00"]}, "/body/args/1"),
        ({"env": {"TOKEN": "a\x00b"}}, "/body/env/TOKEN"),
        ({"env": {"TO\x00KEN": "a"}}, "/body/env/TO\x00KEN"),
        ({"cwd": "/tmp\x00"}, "/body/cwd"),
    ],
)
async def test_nul_in_a_server_entry_is_a_422_naming_the_field(
    tmp_path: Path, entry: dict[str, Any], pointer: str
) -> None:
    # A process's argv and environment cannot hold NUL: each start failed with "ValueError: embedded null byte", a
    # 502 that named no field.
    allowed = {"allow_api_stdio": True, "api_stdio_commands": [sys.executable], "startup_wait_seconds": 10}
    async with running(make_settings(tmp_path, permissions=None, execution=allowed)) as (app, http):
        body = {"id": "nul", "command": sys.executable, "args": ["-c", "pass"], **entry}
        problem = assert_problem(await http.post("/servers", json=body), 422)
        assert problem["errors"][0]["pointer"] == pointer and "NUL" in problem["errors"][0]["reason"], problem
        headers = {"id": "web", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "a\x00b"}}
        problem = assert_problem(await http.post("/servers", json=headers), 422)
        assert problem["errors"][0]["pointer"] == "/body/headers/X-Key", problem
        assert await count_rows(app, Server) == 0


async def test_a_call_to_a_broken_server_tells_a_non_admin_no_more_than_servers_does(tmp_path: Path) -> None:
    """GET /servers shows a non-admin no stderr and no last error; the 502 of a call of its tools quoted both (the
    server's last error with its stderr tail: paths, hosts, whatever the child printed). Admins still read it."""
    crasher = tmp_path / "crasher.py"
    said = "cannot open /srv/internal/db.sqlite on 10.0.0.7"
    crasher.write_text(f"import sys\nsys.stderr.write({said!r} + '\\n')\nsys.exit(3)\n")
    entry = {"command": sys.executable, "args": [str(crasher)]}
    execution = {"servers_file": servers_file(tmp_path, {"public": entry}), "startup_wait_seconds": 10}
    settings = make_settings(tmp_path, execution=execution | {"timeout_seconds": 1.0})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        dev = await cli_key(app, "dev-agent", ["dev"])
        tool = {"server": "public", "name": "get_weather", "description": "Weather forecast for a city"}
        assert (await http.post("/tools", json={"tools": [tool]}, headers=bearer(admin))).status_code == 200
        call = {"name": "public__get_weather", "arguments": {}}
        told = assert_problem(await http.post("/execute", json=call, headers=bearer(dev)), 502)
        assert "not connected" in told["detail"], told
        for leaked in ("/srv/internal", "10.0.0.7", "stderr", "exited with code"):
            assert leaked not in json.dumps(told), (leaked, told)
        operator = assert_problem(await http.post("/execute", json=call, headers=bearer(admin)), 502)
        assert "/srv/internal" in operator["detail"], operator
