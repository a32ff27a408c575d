"""The egress proxy (service/upstream/egress.py): what a stdio server behind it may reach.

Real sockets throughout: the proxy on 127.0.0.1, an HTTP service on loopback that records what reaches it, and the
real mcp-server-fetch started from a servers file. There is no internet here, so an allowed destination is a local
service listed in `egress_allowed_hosts`; DNS answers that change are simulated, as in test_rebinding.py, by
patching `service.upstream.urls.resolve`, the resolver the proxy calls."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
from pathlib import Path

import httpx
import pytest

from service.errors import InvalidRequest
from service.settings import Settings
from service.upstream import urls
from service.upstream.config import parse_servers_document
from service.upstream.demo import demo_servers
from service.upstream.egress import EgressProxy
from tests.security.egress_support import Recorder, basic, child_environment, connect_through, fetch_server, get
from tests.upstream.upstream_support import running


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/secret",
        "http://localhost:{port}/secret",  # a name resolving to loopback
        "http://[::ffff:127.0.0.1]:{port}/secret",  # IPv4-mapped IPv6
        "http://127.1:{port}/secret",  # shorthand a resolver reads as 127.0.0.1
        "http://10.0.0.1:{port}/secret",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
    ],
)
async def test_proxy_refuses_internal_destinations(internal: Recorder, url: str) -> None:
    proxy = EgressProxy()
    try:
        env = await proxy.environment("fetch")
        answer = await get(env["HTTP_PROXY"], url.format(port=internal.port))
    finally:
        await proxy.aclose()
    assert answer.status_code == 403
    assert answer.text.startswith("refused: host ")
    assert "resolves to an internal address" in answer.text
    assert internal.hits == []


async def test_a_refusal_is_logged(internal: Recorder, caplog: pytest.LogCaptureFixture) -> None:
    proxy = EgressProxy()
    try:
        env = await proxy.environment("fetch")
        with caplog.at_level("WARNING", logger="service.upstream.egress"):
            await get(env["HTTP_PROXY"], "http://169.254.169.254/latest/meta-data/")
    finally:
        await proxy.aclose()
    assert [r.getMessage() for r in caplog.records] == [
        "egress proxy: MCP server fetch may not reach 169.254.169.254:80: host '169.254.169.254' resolves to an "
        "internal address (169.254.169.254)"
    ]


async def test_malformed_or_oversized_requests_are_refused(internal: Recorder) -> None:
    proxy = EgressProxy(["127.0.0.1"])
    try:
        env = await proxy.environment("fetch")
        port = await proxy.start()
        auth = basic(env["HTTP_PROXY"])
        answers = []
        for head in (
            f"GET /secret HTTP/1.1\r\nHost: 127.0.0.1:{internal.port}\r\nProxy-Authorization: {auth}\r\n\r\n",
            f"GET ftp://127.0.0.1:{internal.port}/ HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            f"CONNECT 127.0.0.1 HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            f"GET http://127.0.0.1:{internal.port}/ HTTP/1.1\r\nX-Pad: {'a' * 40_000}\r\n\r\n",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head.encode())
            await writer.drain()
            answers.append((await asyncio.wait_for(reader.read(4096), 10)).split(b"\r\n", 1)[0])
            writer.close()
    finally:
        await proxy.aclose()
    assert answers == [
        b"HTTP/1.1 400 Bad Request",
        b"HTTP/1.1 400 Bad Request",
        b"HTTP/1.1 400 Bad Request",
        b"HTTP/1.1 431 Request Header Fields Too Large",
    ]
    assert internal.hits == []


async def test_proxy_refuses_a_tunnel_to_an_internal_address(internal: Recorder) -> None:
    proxy = EgressProxy()
    try:
        env = await proxy.environment("fetch")
        port = await proxy.start()
        refused = await connect_through(port, f"127.0.0.1:{internal.port}", basic(env["HTTPS_PROXY"]))
        mapped = await connect_through(port, f"[::ffff:127.0.0.1]:{internal.port}", basic(env["HTTPS_PROXY"]))
    finally:
        await proxy.aclose()
    assert refused.startswith(b"HTTP/1.1 403 ")
    assert b"internal address (127.0.0.1)" in refused
    assert mapped.startswith(b"HTTP/1.1 403 ")
    assert internal.hits == []


async def test_allowed_hosts_let_a_named_internal_host_through(internal: Recorder) -> None:
    proxy = EgressProxy(["127.0.0.0/8"])
    try:
        env = await proxy.environment("fetch")
        answer = await get(env["HTTP_PROXY"], f"http://127.0.0.1:{internal.port}/page?q=1")
        port = await proxy.start()
        tunnel = await connect_through(port, f"127.0.0.1:{internal.port}", basic(env["HTTPS_PROXY"]))
        metadata = await get(env["HTTP_PROXY"], "http://169.254.169.254/latest/meta-data/")
    finally:
        await proxy.aclose()
    assert answer.status_code == 200
    assert answer.text == "internal secret of 127.0.0.1"
    path, headers = internal.hits[0]
    assert path == "/page?q=1"
    assert "proxy-authorization" not in headers  # the child's credentials stay with the proxy
    assert headers["host"] == f"127.0.0.1:{internal.port}"
    assert tunnel == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert metadata.status_code == 403  # the entry allows its own network only


def test_a_public_address_passes_the_check() -> None:
    public = [ipaddress.ip_address("93.184.215.14"), ipaddress.ip_address("2606:2800:21f:cb07:6820:80da:af6b:8b2c")]
    assert urls.refusal("example.com", public, []) is None
    assert urls.refusal("example.com", [*public, ipaddress.ip_address("10.1.2.3")], []) is not None


@pytest.mark.parametrize("authorization", [None, "Basic " + base64.b64encode(b"fetch:guess").decode(), "Bearer x"])
async def test_missing_or_wrong_credentials_get_407(internal: Recorder, authorization: str | None) -> None:
    proxy = EgressProxy(["127.0.0.1"])
    try:
        env = await proxy.environment("fetch")
        port = await proxy.start()
        answer = await connect_through(port, f"127.0.0.1:{internal.port}", authorization)
        user = httpx.URL(env["HTTP_PROXY"]).username
        guessed = await get(f"http://{user}:wrong@127.0.0.1:{port}", f"http://127.0.0.1:{internal.port}/")
    finally:
        await proxy.aclose()
    assert answer.startswith(b"HTTP/1.1 407 ")
    assert b'Proxy-Authenticate: Basic realm="toolscout-egress"' in answer
    assert guessed.status_code == 407
    assert internal.hits == []


async def test_a_removed_servers_credentials_stop_working(internal: Recorder) -> None:
    proxy = EgressProxy(["127.0.0.1"])
    try:
        env = await proxy.environment("fetch")
        other = await proxy.environment("other")
        proxy.forget("fetch")
        gone = await get(env["HTTP_PROXY"], f"http://127.0.0.1:{internal.port}/")
        kept = await get(other["HTTP_PROXY"], f"http://127.0.0.1:{internal.port}/")
    finally:
        await proxy.aclose()
    assert env["HTTP_PROXY"] != other["HTTP_PROXY"]
    assert (gone.status_code, kept.status_code) == (407, 200)


async def test_the_proxy_connects_to_the_address_it_checked(
    monkeypatch: pytest.MonkeyPatch, internal: Recorder
) -> None:
    """A rebinding name: the first answer is an allowed address, every later one loopback. The proxy asks once
    and connects to that answer, so the service on 127.0.0.1 sees nothing."""
    allowed = Recorder(host="127.0.0.2", port=internal.port)
    allowed_server = allowed.serve()
    asked: list[str] = []

    async def rebinding(host: str, port: int) -> list[urls.IpAddress]:
        asked.append(host)
        return [ipaddress.ip_address("127.0.0.2" if len(asked) == 1 else "127.0.0.1")]

    monkeypatch.setattr(urls, "resolve", rebinding)
    proxy = EgressProxy(["127.0.0.2"])
    try:
        env = await proxy.environment("fetch")
        answer = await get(env["HTTP_PROXY"], f"http://rebind.test:{internal.port}/")
    finally:
        await proxy.aclose()
        allowed_server.shutdown()
        allowed_server.server_close()
    assert asked == ["rebind.test"]
    assert answer.text == "internal secret of 127.0.0.2"
    assert internal.hits == []


@pytest.mark.upstream
async def test_mcp_server_fetch_behind_the_proxy_reaches_no_internal_address(
    tmp_path: Path, python_servers: str, internal: Recorder
) -> None:
    url = f"http://127.0.0.1:{internal.port}/secret"
    async with running(tmp_path, {"web": fetch_server(python_servers)}) as (app, client):
        fetched = await client.post("/execute", json={"name": "web__fetch", "arguments": {"url": url}})
        gateway = app.state.resources.gateway
        pid = gateway.pool.get("web").health.pid
        env = child_environment(pid)
        proxy_port = gateway.pool.egress.port
    assert fetched.json()["is_error"] is True, fetched.text
    assert "status code 403" in fetched.json()["content"][0]["text"]
    assert internal.hits == []
    proxy = httpx.URL(env["HTTP_PROXY"])
    assert (proxy.host, proxy.port) == ("127.0.0.1", proxy_port)
    assert env["HTTPS_PROXY"] == env["ALL_PROXY"] == env["http_proxy"] == env["HTTP_PROXY"]
    assert env["NO_PROXY"] == env["no_proxy"] == ""


@pytest.mark.upstream
async def test_mcp_server_fetch_reaches_an_allowed_internal_host(
    tmp_path: Path, python_servers: str, internal: Recorder
) -> None:
    url = f"http://127.0.0.1:{internal.port}/secret"
    async with running(tmp_path, {"web": fetch_server(python_servers)}, egress_allowed_hosts=["127.0.0.1"]) as (
        _,
        client,
    ):
        fetched = await client.post("/execute", json={"name": "web__fetch", "arguments": {"url": url}})
    assert fetched.json()["is_error"] is False, fetched.text
    assert "internal secret of 127.0.0.1" in fetched.json()["content"][0]["text"]
    assert [path for path, _ in internal.hits] == ["/secret"]
    assert "proxy-authorization" not in internal.hits[0][1]


def test_the_demo_fetch_server_runs_behind_the_proxy(tmp_path: Path) -> None:
    specs = {spec.id: spec for spec in demo_servers(Settings(data_dir=tmp_path))}
    assert specs["fetch"].egress_proxy is True
    assert specs["time"].egress_proxy is False
    if "everything" in specs:  # with Node: its gzip resource fetches URLs, and the preload confines Node's fetch
        assert specs["everything"].egress_proxy is True


def test_the_servers_file_key_is_checked() -> None:
    on = parse_servers_document({"mcpServers": {"web": {"command": "x", "egress_proxy": True}}})
    assert on[0].egress_proxy is True and on[0].config()["egress_proxy"] is True
    off = parse_servers_document({"mcpServers": {"web": {"command": "x"}}})
    assert off[0].egress_proxy is False and "egress_proxy" not in off[0].config()
    with pytest.raises(InvalidRequest) as wrong_type:
        parse_servers_document({"mcpServers": {"web": {"command": "x", "egress_proxy": "yes"}}})
    assert wrong_type.value.extensions["errors"] == [
        {"pointer": "/mcpServers/web/egress_proxy", "reason": "must be true or false"}
    ]
    with pytest.raises(InvalidRequest) as over_http:
        parse_servers_document({"mcpServers": {"docs": {"url": "https://example.com/mcp", "egress_proxy": True}}})
    assert over_http.value.extensions["errors"][0]["pointer"] == "/mcpServers/docs/egress_proxy"
    assert over_http.value.extensions["errors"][0]["reason"] == "only a stdio server runs behind the egress proxy"
