"""Open mode answers only requests sent to a loopback Host. A reverse proxy that passes its client's Host on (nginx's
`proxy_set_header Host $host`) and adds no forwarding header connects from loopback like the local user: with its
public name in policy.allowed_hosts, or an address (IP-literal Hosts are always allowed), every client of the proxy
was the open admin."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from tests.security.conftest import assert_problem, cli_key, make_settings, running, serving


class HostPassingProxy:
    """nginx's `proxy_pass http://127.0.0.1:PORT; proxy_set_header Host $host;` and no X-Forwarded-For: what reaches
    the service is a loopback connection carrying the public Host, and nothing else of the client."""

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
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]  # Host kept as sent
        async with httpx.AsyncClient(base_url=self.upstream) as http:
            answer = await http.request(scope["method"], scope["path"], content=body, headers=headers)
        await send({"type": "http.response.start", "status": answer.status_code, "headers": answer.headers.raw})
        await send({"type": "http.response.body", "body": answer.content})


@pytest.mark.parametrize("public_host", ["tools.example", "203.0.113.10:8443", "[2001:db8::5]"])
async def test_a_proxy_passing_its_clients_host_makes_no_one_admin(tmp_path: Path, public_host: str) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"allowed_hosts": ["tools.example"]})
    async with running(settings) as (app, _http):
        async with serving(app) as direct, serving(HostPassingProxy(direct)) as proxied, httpx.AsyncClient() as http:
            assert (await http.get(f"{direct}/tools")).status_code == 200  # the local user, as before
            answer = await http.get(f"{proxied}/tools", headers={"Host": public_host})
            problem = assert_problem(answer, 401, "unauthorized")
            host = public_host.rsplit(":", 1)[0] if not public_host.startswith("[") else public_host[1:-1]
            assert f"sent to the host {host!r}" in problem["detail"], problem
            assert "toolscout keys create" in problem["detail"]
            refused = await http.post(f"{proxied}/search", json={"query": "x"}, headers={"Host": public_host})
            assert_problem(refused, 401, "unauthorized")


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8765", "127.0.0.1:8765", "127.0.0.2", "[::1]:8765", "console.localhost"]
)
async def test_every_loopback_host_still_reaches_open_mode(tmp_path: Path, host: str) -> None:
    async with running(make_settings(tmp_path, permissions=None), host=host) as (_app, http):
        answer = await http.get("/tools")
        assert answer.status_code == 200, answer.text


async def test_with_a_key_a_public_host_is_served_as_ever(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"allowed_hosts": ["tools.example"]})
    async with running(settings, host="tools.example") as (app, http):
        assert_problem(await http.get("/tools"), 401, "unauthorized")
        key = await cli_key(app, "root", ["admin"])
        answer = await http.get("/tools", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
