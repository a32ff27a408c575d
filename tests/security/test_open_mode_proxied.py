"""Open mode (no API key, bound to loopback) and the keyless MCP front end serve this machine's own user: a reverse
proxy put in front of the loopback address (for TLS, or a public name) connects from loopback and, as nginx does by
default, sends the loopback Host it was told to reach, so every client of the proxy was the open admin (the REST
API) or acted with the front end's API key. A request that carries a proxy's headers is refused with a 401."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from service.mcp.serve import http_app
from service.mcp.server import create_frontend
from tests.security.conftest import assert_problem, cli_key, make_settings, running, serving
from tests.security.test_mcp_frontend import INITIALIZE

# What common proxies add to a request they relay.
PROXY_HEADERS = {
    "nginx": {"X-Real-IP": "203.0.113.7", "X-Forwarded-For": "203.0.113.7"},
    "caddy": {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "tools.example"},
    "rfc7239": {"Forwarded": "for=203.0.113.7;proto=https"},
    "via": {"Via": "1.1 squid"},
}


class ReverseProxy:
    """A reverse proxy as nginx's `proxy_pass http://127.0.0.1:PORT` with the usual X-Real-IP and X-Forwarded-For:
    the Host it sends is the upstream's address, and the client's address goes in the headers."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        client = scope["client"][0]
        headers = {k.decode(): v.decode() for k, v in scope["headers"] if k.lower() not in (b"host", b"content-length")}
        headers |= {"X-Real-IP": client, "X-Forwarded-For": client}
        async with httpx.AsyncClient(base_url=self.upstream) as http:
            path = scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
            answer = await http.request(scope["method"], path, content=body, headers=headers)
        await send({"type": "http.response.start", "status": answer.status_code, "headers": answer.headers.raw})
        await send({"type": "http.response.body", "body": answer.content})


async def test_a_reverse_proxy_in_front_of_open_mode_makes_no_one_admin(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, _http):
        async with serving(app) as direct, serving(ReverseProxy(direct)) as proxied, httpx.AsyncClient() as http:
            own = await http.post(f"{direct}/search", json={"query": "anything"})
            assert own.status_code == 200, own.text  # the local user is served as before
            assert (await http.get(f"{direct}/tools")).status_code == 200
            for method, path, body in (("POST", "/search", {"query": "x"}), ("GET", "/tools", None)):
                answer = await http.request(method, f"{proxied}{path}", json=body)
                problem = assert_problem(answer, 401, "unauthorized")
                assert "proxy" in problem["detail"] and "toolscout keys create" in problem["detail"]


@pytest.mark.parametrize("proxy", sorted(PROXY_HEADERS))
async def test_any_proxys_headers_end_open_mode_for_that_request(tmp_path: Path, proxy: str) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        assert_problem(await http.get("/tools", headers=PROXY_HEADERS[proxy]), 401, "unauthorized")
        assert (await http.get("/tools")).status_code == 200
        key = await cli_key(app, "root", ["admin"])  # with keys, a proxied request with a key is served as ever
        answer = await http.get("/tools", headers={**PROXY_HEADERS[proxy], "Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text


async def test_the_keyless_front_end_answers_no_proxied_request(world: dict[str, Any]) -> None:
    settings = make_settings(world["tmp_path"])
    settings.frontend.api_key = world["admin"]
    frontend = create_frontend(settings, transport="http", api_transport=httpx.ASGITransport(app=world["app"]))
    app = http_app(frontend, host="127.0.0.1")
    initialize = json.dumps(INITIALIZE)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8766") as http:
            answers = {
                name: await http.post("/mcp", content=initialize, headers={**headers, **extra})
                for name, extra in PROXY_HEADERS.items()
            }
            own = await http.post("/mcp", content=initialize, headers=headers)
    assert own.status_code == 200, own.text
    for name, answer in answers.items():
        assert answer.status_code == 401, (name, answer.text)
        assert "proxy" in answer.json()["detail"]


async def test_a_client_that_is_not_loopback_is_not_the_open_admin(tmp_path: Path) -> None:
    """Behind a proxy listed in policy.trusted_proxies uvicorn makes the forwarded address the client: not loopback,
    not the local user (a dual-stack socket's ::ffff:127.0.0.1 is)."""
    async with running(make_settings(tmp_path, permissions=None)) as (app, _http):
        for client, status in ((("10.0.0.5", 4000), 401), (("::ffff:10.0.0.5", 4000), 401), (("::1", 4000), 200)):
            transport = httpx.ASGITransport(app=app, client=client)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
                assert (await http.get("/tools")).status_code == status, client
        transport = httpx.ASGITransport(app=app, client=("::ffff:127.0.0.1", 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
            assert (await http.get("/tools")).status_code == 200
