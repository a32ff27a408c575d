"""DNS rebinding: a server added over the API connects only to addresses checked as each connection opens.

There is no DNS server to control here, so a changing DNS answer is simulated by patching
`service.upstream.urls.resolve`, the one resolver that both the URL check and the connection check call. The
upstream is a real MCP server over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.db.models import Server
from service.upstream import urls
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running, servers_file
from tests.upstream.upstream_support import HttpServer

pytestmark = pytest.mark.upstream

PUBLIC = ipaddress.ip_address("93.184.215.14")
METADATA = ipaddress.ip_address("169.254.169.254")
REAL_RESOLVE = urls.resolve
Answer = Callable[[str, int, int], Awaitable[list[urls.IpAddress]]]


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    """The test MCP server over streamable HTTP on 127.0.0.1; it also accepts `Host: upstream.test`."""
    server = HttpServer("upstream.test")
    server.start()
    try:
        yield server
    finally:
        server.kill()


def fake_dns(monkeypatch: pytest.MonkeyPatch, answer: Answer) -> list[str]:
    """Make `answer(host, port, nth query)` the DNS answer; returns the hosts asked, in order."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[urls.IpAddress]:
        asked.append(host)
        return await answer(host, port, len(asked))

    monkeypatch.setattr(urls, "resolve", resolve)
    return asked


async def add(http: httpx.AsyncClient, admin: str, server_id: str, url: str) -> httpx.Response:
    return await http.post("/servers", json={"id": server_id, "url": url}, headers=bearer(admin))


async def echo(http: httpx.AsyncClient, admin: str, server_id: str) -> httpx.Response:
    body = {"name": f"{server_id}__echo", "arguments": {"text": "hi"}}
    return await http.post("/execute", json=body, headers=bearer(admin))


async def test_a_name_rebound_after_its_check_is_refused_when_connecting(
    tmp_path: Path, http_server: HttpServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The attacker's DNS answers a public address to the two checks made while the server is added (the route's
    and the start's), then the name's real answer: `localhost`, 127.0.0.1, where the MCP server listens. Before
    connections were checked, the HTTP client resolved the name again by itself and reached it (bb6438b: 201)."""

    async def rebinding(host: str, port: int, nth: int) -> list[urls.IpAddress]:
        return [PUBLIC] if nth <= 2 else await REAL_RESOLVE(host, port)

    asked = fake_dns(monkeypatch, rebinding)
    caplog.set_level(logging.WARNING, "service.upstream")
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        body = assert_problem(await add(http, admin, "rebound", http_server.url.replace("127.0.0.1", "localhost")), 502)
        listed = (await http.get("/servers", headers=bearer(admin))).json()["servers"]
        assert await count_rows(app, Server) == 0
    reason = "host 'localhost' resolves to an internal address (127.0.0.1)"
    assert reason in body["detail"] and "execution.upstream_allowed_hosts" in body["detail"], body
    assert listed == [] and len(asked) >= 3
    refusals = [r for r in caplog.records if "rebound" in r.getMessage() and reason in r.getMessage()]
    assert refusals and all(not r.exc_info for r in refusals)


async def test_a_name_rebound_later_stops_the_server_with_a_clear_error(
    tmp_path: Path, http_server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator allows 127.0.0.1; the name answers it, then the metadata address when the server reconnects."""
    rebound = asyncio.Event()

    async def later(host: str, port: int, nth: int) -> list[urls.IpAddress]:
        return [METADATA] if rebound.is_set() else await REAL_RESOLVE(host, port)

    fake_dns(monkeypatch, later)
    execution = {"upstream_allowed_hosts": ["127.0.0.1"], "timeout_seconds": 3.0}
    settings = make_settings(tmp_path, permissions=None, execution=execution, policy={"rate_limit_per_minute": 0})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        added = await add(http, admin, "later", http_server.url.replace("127.0.0.1", "localhost"))
        assert added.status_code == 201, added.text
        assert (await echo(http, admin, "later")).status_code == 200
        rebound.set()
        http_server.kill()  # the session is lost; every reconnection resolves the name again
        await echo(http, admin, "later")
        view: dict[str, Any] = {}
        for _ in range(100):
            view = (await http.get("/servers/later", headers=bearer(admin))).json()
            if "169.254.169.254" in (view["health"]["last_error"] or ""):
                break
            await asyncio.sleep(0.1)
        call = await echo(http, admin, "later")
    assert view["state"] in ("backoff", "connecting"), view
    assert "refused to connect" in view["health"]["last_error"] and "internal address" in view["health"]["last_error"]
    detail = assert_problem(call, 502)["detail"]
    assert "not connected" in detail and "169.254.169.254" in detail, detail


@pytest.mark.parametrize(
    ("allowed", "host"),
    [(["localhost"], "localhost"), (["127.0.0.0/8"], "upstream.test"), (["127.0.0.1"], "127.0.0.1")],
    ids=["host name", "network", "address"],
)
async def test_allowed_hosts_and_networks_still_connect(
    tmp_path: Path, http_server: HttpServer, monkeypatch: pytest.MonkeyPatch, allowed: list[str], host: str
) -> None:
    """`upstream.test` resolves nowhere but here (to 127.0.0.1): the client connects to the checked address."""

    async def here(name: str, port: int, nth: int) -> list[urls.IpAddress]:
        return [ipaddress.ip_address("127.0.0.1")] if name == "upstream.test" else await REAL_RESOLVE(name, port)

    asked = fake_dns(monkeypatch, here)
    execution = {"upstream_allowed_hosts": allowed}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        added = await add(http, admin, "allowed", http_server.url.replace("127.0.0.1", host))
        call = await echo(http, admin, "allowed")
    assert added.status_code == 201 and added.json()["state"] == "ready", added.text
    assert call.status_code == 200 and call.json()["content"][0]["text"] == "hi"
    assert len(asked) >= 3  # the route's check, the start's, and the connection's


async def test_a_loopback_server_of_the_servers_file_is_trusted(
    tmp_path: Path, http_server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No check at all for the servers file: its loopback server connects without upstream_allowed_hosts."""

    async def real(host: str, port: int, nth: int) -> list[urls.IpAddress]:
        return await REAL_RESOLVE(host, port)

    asked = fake_dns(monkeypatch, real)
    path = servers_file(tmp_path, {"local": {"url": http_server.url.replace("127.0.0.1", "localhost")}})
    settings = make_settings(tmp_path, permissions=None, execution={"servers_file": path, "startup_wait_seconds": 30})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        view = (await http.get("/servers/local", headers=bearer(admin))).json()
        call = await echo(http, admin, "local")
    assert view["source"] == "file" and view["state"] == "ready", view
    assert call.status_code == 200 and asked == []
