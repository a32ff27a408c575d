"""DNS rebinding and cross-origin browser requests: a foreign Host gets 421, a foreign Origin 403, CORS is off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from service.db.models import Tool
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running

TOOL = {"server": "evil", "name": "planted", "description": "A tool a web page tried to register"}


async def test_dns_rebinding_host_gets_421_and_registers_nothing(tmp_path: Path) -> None:
    # Open mode on loopback: without the host check this page would be an admin.
    async with running(make_settings(tmp_path, permissions=None), host="rebind.evil.example:8765") as (app, http):
        body = assert_problem(await http.post("/tools", json={"tools": [TOOL]}), 421, "misdirected-request")
        assert "rebind.evil.example" in body["detail"]
        assert_problem(await http.post("/servers", json={"id": "x", "command": "sh"}), 421)
        assert_problem(await http.get("/keys"), 421)
        assert await count_rows(app, Tool) == 0


async def test_local_names_and_addresses_are_served(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        for host in ("localhost", "localhost:8765", "127.0.0.1:8765", "[::1]:8765", "api.localhost"):
            response = await http.get("/tools", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)


async def test_configured_names_are_served(tmp_path: Path) -> None:
    """To a key: open mode answers loopback Hosts only (test_open_mode_host.py)."""
    settings = make_settings(tmp_path, permissions=None, policy={"allowed_hosts": ["toolscout.internal"]})
    async with running(settings, host="toolscout.internal") as (app, http):
        key = bearer(await cli_key(app, "root", ["admin"]))
        assert (await http.get("/tools", headers=key)).status_code == 200
        assert_problem(await http.get("/tools", headers={"Host": "other.internal", **key}), 421)


async def test_cross_origin_request_is_refused_and_gets_no_cors_headers(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        headers = {"Origin": "https://evil.example"}
        response = await http.post("/tools", json={"tools": [TOOL]}, headers=headers)
        assert_problem(response, 403, "forbidden-origin")
        assert "access-control-allow-origin" not in response.headers
        preflight = await http.options("/tools", headers={**headers, "Access-Control-Request-Method": "POST"})
        assert preflight.status_code in (403, 405)
        assert "access-control-allow-origin" not in preflight.headers
        assert await count_rows(app, Tool) == 0
        # A page of the service's own origin (e.g. a console on localhost) is fine.
        same = await http.get("/tools", headers={"Origin": "http://localhost:8765"})
        assert same.status_code == 200


async def test_cors_only_for_configured_origins(tmp_path: Path) -> None:
    policy: dict[str, Any] = {"cors_origins": ["https://console.example"]}
    async with running(make_settings(tmp_path, permissions=None, policy=policy)) as (_app, http):
        preflight = await http.options(
            "/tools",
            headers={"Origin": "https://console.example", "Access-Control-Request-Method": "GET"},
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://console.example"
        other = await http.get("/tools", headers={"Origin": "https://evil.example"})
        assert_problem(other, 403, "forbidden-origin")


async def test_a_wildcard_cors_origin_never_makes_a_page_the_open_admin(tmp_path: Path) -> None:
    # Open mode with `*` among the CORS origins: the preflight passes and a page of any site called /tools as the
    # admin and read the answer (`access-control-allow-origin: *`), as it would /execute.
    policy: dict[str, Any] = {"cors_origins": ["*", "https://console.example"]}
    async with running(make_settings(tmp_path, permissions=None, policy=policy)) as (app, http):
        evil = {"Origin": "https://evil.example"}
        body = assert_problem(await http.post("/tools", json={"tools": [TOOL]}, headers=evil), 401, "unauthorized")
        assert "cors_origins" in body["detail"]
        assert_problem(await http.get("/tools", headers=evil), 401, "unauthorized")
        assert_problem(await http.post("/search", json={"query": "weather"}, headers=evil), 401)
        assert await count_rows(app, Tool) == 0
        # Origins listed by name, the service's own and requests without an Origin keep the open admin.
        for origin in ("https://console.example", "http://localhost:8765", None):
            headers = {"Origin": origin} if origin else {}
            response = await http.post("/tools", json={"tools": [TOOL]}, headers=headers)
            assert response.status_code == 200, (origin, response.text)
        # With a key, `*` serves every page as CORS says: the key, not the origin, is the credential.
        key = await cli_key(app, "app", ["admin"])
        response = await http.get("/tools", headers={**evil, **bearer(key)})
        assert response.status_code == 200 and response.headers["access-control-allow-origin"] == "*"


async def test_a_cross_site_page_loading_the_api_without_cors_is_refused(tmp_path: Path) -> None:
    # `<img src="http://127.0.0.1:8765/events">` on any site sends no Origin, only Sec-Fetch-*: in open mode each
    # was the local admin, so a page held every event stream of the open user and drained its rate limit.
    settings = make_settings(tmp_path, permissions=None, policy={"rate_limit_burst": 3, "rate_limit_per_minute": 1})
    image = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
    async with running(settings) as (_app, http):
        for _ in range(6):
            body = assert_problem(await http.get("/tools", headers=image), 403, "forbidden-origin")
            assert "another site" in body["detail"]
        assert_problem(await http.get("/events", headers={**image, "Sec-Fetch-Dest": "script"}), 403)
        # The local user's budget is whole: its own requests (same-origin pages, scripts, the front end) pass.
        for site in ("same-origin", None, "none"):
            headers = {"Sec-Fetch-Site": site} if site else {}
            assert (await http.get("/tools", headers=headers)).status_code == 200, site
        # A link followed from another site to the console still opens it.
        page = await http.get("/console", headers={**image, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
        assert page.status_code == 200 and "frame-ancestors 'none'" in page.headers["content-security-policy"]


async def test_a_request_with_two_host_headers_gets_400(tmp_path: Path) -> None:
    # The host check read the last Host and the routes the first: the allowed name last, another first passed.
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        for hosts in (["evil.example", "localhost"], ["localhost", "localhost"]):
            headers = [*(("Host", host) for host in hosts), ("Content-Type", "application/json")]
            request = httpx.Request(
                "POST", "http://localhost/tools", headers=headers, content=json.dumps({"tools": [TOOL]})
            )
            assert [v for k, v in request.headers.raw if k.lower() == b"host"] == [h.encode() for h in hosts]
            body = assert_problem(await http.send(request), 400, "bad-request")
            assert "one Host header" in body["detail"]
        assert await count_rows(app, Tool) == 0
        assert (await http.post("/tools", json={"tools": [TOOL]})).status_code == 200


async def test_a_redirect_names_a_path_never_the_requests_host(tmp_path: Path) -> None:
    # Starlette's trailing-slash redirect wrote the Host and scheme: `Host: 6.6.6.6` (any IP literal passes the
    # host check) got `Location: http://6.6.6.6/console`, and behind a TLS proxy every redirect left https.
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        for host, path, location in (
            ("6.6.6.6", "/console/", "/console"),
            ("localhost:8765", "/tools/?limit=5", "/tools?limit=5"),
        ):
            response = await http.get(path, headers={"Host": host})
            assert response.status_code == 307 and response.headers["location"] == location, response.headers
            assert response.headers["cache-control"] == "no-store"
        # `//evil.example` alone would be another host: that one stays absolute, on this host.
        odd = await http.get("//evil.example/", headers={"Host": "localhost"})
        assert not odd.headers.get("location", "/x").startswith("//"), odd.headers
