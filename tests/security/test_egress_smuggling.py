"""The egress proxy against a child that writes its own bytes: Host headers that disagree with the request target,
folded header lines, internal addresses in other spellings, silent connections by the thousand, idle tunnels.

Real sockets, as in test_egress_proxy.py: the proxy on 127.0.0.1 and a recording HTTP service on loopback."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from service.upstream.egress import EgressProxy
from tests.security.egress_support import (
    Recorder,
    basic,
    child_environment,
    connect_through,
    fetch_server,
)
from tests.upstream.upstream_support import running


async def send_raw(port: int, head: str) -> bytes:
    """The proxy's whole answer to a request written byte for byte."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode("latin-1"))
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


async def through_an_allowing_proxy(request_line: str, headers: str) -> bytes:
    """The answer of a proxy that lets 127.0.0.1 through to a head written byte for byte, with a server's
    credentials after the given header lines."""
    proxy = EgressProxy(["127.0.0.1"])
    try:
        env = await proxy.environment("fetch")
        port = await proxy.start()
        credentials = f"Proxy-Authorization: {basic(env['HTTP_PROXY'])}\r\n"
        return await send_raw(port, f"{request_line}\r\n{headers}{credentials}\r\n")
    finally:
        await proxy.aclose()


async def test_the_host_sent_on_is_the_request_targets(internal: Recorder) -> None:
    """An allowed destination with a Host of another site: the destination sees the target's own Host."""
    answer = await through_an_allowing_proxy(
        f"GET http://127.0.0.1:{internal.port}/page HTTP/1.1", "Host: admin.internal\r\n"
    )
    assert answer.startswith(b"HTTP/1.0 200 ")
    assert [(path, headers["host"]) for path, headers in internal.hits] == [("/page", f"127.0.0.1:{internal.port}")]


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ("Host: 127.0.0.1\r\nHost: admin.internal\r\n", b"more than one Host header"),
        ("X-Note: a\r\n Host: admin.internal\r\n", b"malformed header line (folded, or without a colon)"),
        ("Host : admin.internal\r\n", b"malformed header line (whitespace around the name)"),
        ("no colon here\r\n", b"malformed header line (folded, or without a colon)"),
    ],
)
async def test_ambiguous_heads_are_refused(internal: Recorder, extra: str, reason: bytes) -> None:
    answer = await through_an_allowing_proxy(f"GET http://127.0.0.1:{internal.port}/ HTTP/1.1", extra)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(reason + b"\n")
    assert internal.hits == []


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0177.0.0.1", "0x7f.1", "127.000.000.001", "LOCALHOST", "0", "[::1%lo]", "[::ffff:7f00:1]"],
)
async def test_a_tunnel_to_loopback_spelt_otherwise_is_refused(internal: Recorder, host: str) -> None:
    proxy = EgressProxy()
    try:
        env = await proxy.environment("fetch")
        port = await proxy.start()
        answer = await connect_through(port, f"{host}:{internal.port}", basic(env["HTTPS_PROXY"]))
    finally:
        await proxy.aclose()
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"resolves to an internal address" in answer
    assert internal.hits == []


async def test_a_silent_connection_gives_up_its_slot() -> None:
    """A connection that sends no request head within head_seconds is closed, so silent ones cannot keep every
    slot for long."""
    proxy = EgressProxy(max_connections=1, head_seconds=0.3)
    port = await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        closed = await asyncio.wait_for(reader.read(), 5)  # b"" once the proxy closes it
        writer.close()
        after = await send_raw(port, "GET http://example.test/ HTTP/1.1\r\n\r\n")
    finally:
        await proxy.aclose()
    assert closed == b""
    assert after.startswith(b"HTTP/1.1 407 ")  # the slot came back


async def test_an_idle_tunnel_ends(internal: Recorder) -> None:
    proxy = EgressProxy(["127.0.0.1"], idle_seconds=0.5)
    try:
        env = await proxy.environment("fetch")
        port = await proxy.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        auth = basic(env["HTTPS_PROXY"])
        writer.write(f"CONNECT 127.0.0.1:{internal.port} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n".encode())
        await writer.drain()
        established = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        rest = await asyncio.wait_for(reader.read(), 5)  # nothing sent either way: the proxy closes the tunnel
        writer.close()
    finally:
        await proxy.aclose()
    assert established == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert rest == b""


@pytest.mark.upstream
@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_refused_fetch_tells_the_caller_no_proxy_credentials(
    tmp_path: Path, python_servers: str, internal: Recorder, scheme: str
) -> None:
    """The real mcp-server-fetch: what a caller reads of a refusal (a 403, or a ProxyError for a tunnel) names
    neither the proxy's password nor its user."""
    url = f"{scheme}://127.0.0.1:{internal.port}/secret"
    async with running(tmp_path, {"web": fetch_server(python_servers)}) as (app, client):
        fetched = await client.post("/execute", json={"name": "web__fetch", "arguments": {"url": url}})
        proxy = httpx.URL(child_environment(app.state.resources.gateway.pool.get("web").health.pid)["HTTP_PROXY"])
        servers = await client.get("/servers")
    assert fetched.json()["is_error"] is True, fetched.text
    assert "403" in fetched.text
    for secret in (proxy.password, proxy.username):
        assert secret and secret not in fetched.text and secret not in servers.text
    assert internal.hits == []


@pytest.fixture
def redirector(internal: Recorder) -> Iterator[str]:
    """An allowed site on 127.0.0.2 whose every page redirects to the internal service on 127.0.0.1."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{internal.port}/secret")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}/start"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.upstream
async def test_a_redirect_into_internal_space_is_not_followed_through_the_proxy(
    tmp_path: Path, python_servers: str, internal: Recorder, redirector: str
) -> None:
    """The proxy passes the 302 on as bytes; the fetch server's next request goes through the proxy and is checked."""
    async with running(tmp_path, {"web": fetch_server(python_servers)}, egress_allowed_hosts=["127.0.0.2"]) as (
        _,
        client,
    ):
        fetched = await client.post("/execute", json={"name": "web__fetch", "arguments": {"url": redirector}})
    assert fetched.json()["is_error"] is True, fetched.text
    assert "status code 403" in fetched.json()["content"][0]["text"]
    assert internal.hits == []
