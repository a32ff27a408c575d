"""The console's session in Chromium: after sign-in no script of the page can read the key (not in sessionStorage,
localStorage or document.cookie) and the session cookie is HttpOnly and SameSite=Strict; a page of another origin
of the same site (another port: the cookie goes along, SameSite or not) that posts a form to the console's API is
refused; sign-out and a revoked key end the session on the server, not just in the tab.
(The HTTP side, expiry included, is tests/security/test_console_sessions.py.)"""

from __future__ import annotations

import html
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser.conftest import Live
from tests.browser.test_console import browser  # noqa: F401 (the module's browser fixture)
from tests.processes import free_port

playwright_sync = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.browser, pytest.mark.upstream, pytest.mark.model]

COOKIE = "toolscout_console"


def sign_in(browser: Any, live: Live, key: str) -> tuple[Any, Any]:  # noqa: F811
    """A new browser context and tab signed in to the console with this key."""
    context = browser.new_context()
    tab = context.new_page()
    tab.goto(live.url + "/console")
    tab.fill("#signin-key", key)
    tab.click("#signin-form button")
    tab.wait_for_selector('.page[data-page="overview"][aria-busy="false"]')
    return context, tab


def session_cookie(context: Any) -> dict[str, Any] | None:
    found = [c for c in context.cookies() if c["name"] == COOKIE]
    return found[0] if found else None


def replay(live: Live, session_id: str, path: str = "/console/api/me") -> httpx.Response:
    """A console request carrying this session id, outside the browser."""
    headers = {"X-Toolscout-Console": "1", "Cookie": f"{COOKIE}={session_id}"}
    return httpx.get(live.url + path, headers=headers, timeout=30)


@pytest.fixture
def temp_key(live: Live) -> Iterator[dict[str, Any]]:
    """A key of its own (admin), revoked after the test."""
    with live.client(live.admin_key) as admin:
        created = admin.post("/keys", json={"caller": "console-temp", "roles": ["admin"]}).json()
    yield created
    with live.client(live.admin_key) as admin:
        admin.delete(f"/keys/{created['id']}")


def test_the_key_is_out_of_reach_of_the_page_after_sign_in(browser: Any, live: Live, temp_key: dict[str, Any]) -> None:  # noqa: F811
    context, tab = sign_in(browser, live, temp_key["key"])
    kept = tab.evaluate(
        """() => ({
            session: JSON.stringify(Object.entries(sessionStorage)),
            local: JSON.stringify(Object.entries(localStorage)),
            cookie: document.cookie,
            input: document.getElementById("signin-key").value,
            helpers: Object.keys(window.TS).join(","),
        })"""
    )
    key = temp_key["key"]
    assert kept["session"] == "[]" and kept["local"] == "[]", kept
    assert kept["cookie"] == "" and kept["input"] == "", kept
    assert key not in json.dumps(kept) and "auth" not in kept["helpers"].split(",")
    cookie = session_cookie(context)
    assert cookie is not None, context.cookies()
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/console/api"
    assert cookie["secure"] is False  # plain http here; console.cookie_secure=auto sets it over https
    assert cookie["expires"] > 0 and key not in cookie["value"] and len(cookie["value"]) >= 40
    assert [c["name"] for c in context.cookies()] == [COOKIE]
    assert replay(live, cookie["value"]).json()["caller"] == "console-temp"  # the cookie is the session
    context.close()


class AttackerPage(http.server.BaseHTTPRequestHandler):
    """A page of another origin of the same site (127.0.0.1, another port) that posts a form to the console's API."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802 - the handler's method name
        # text/plain makes the body JSON-shaped: {"caller": "csrf-victim", "roles": ["admin"], "x": "="}
        name = html.escape('{"caller": "csrf-victim", "roles": ["admin"], "x": "')
        page = (
            f'<form method="POST" action="{self.target}" enctype="text/plain">'
            f'<input name="{name}" value="&quot;}}"></form><script>document.forms[0].submit()</script>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def attacker(live: Live) -> Iterator[str]:
    AttackerPage.target = live.url + "/console/api/keys"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), AttackerPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_a_cross_site_form_post_with_the_cookie_is_refused(
    browser: Any,  # noqa: F811
    live: Live,
    temp_key: dict[str, Any],
    attacker: str,
) -> None:
    context, tab = sign_in(browser, live, temp_key["key"])
    with tab.expect_response(lambda r: r.url.endswith("/console/api/keys")) as answer:
        tab.goto(attacker)
    response = answer.value
    # 403 cross-site-request, not 401: the browser did send the cookie (same site), and the server refused it.
    assert response.status == 403
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"].endswith("/cross-site-request") and problem["status"] == 403, problem
    with live.client(live.admin_key) as admin:
        callers = [k["caller"] for k in admin.get("/keys").json()["keys"]]
    assert "csrf-victim" not in callers
    context.close()


def test_sign_out_ends_the_session_on_the_server(browser: Any, live: Live, temp_key: dict[str, Any]) -> None:  # noqa: F811
    context, tab = sign_in(browser, live, temp_key["key"])
    cookie = session_cookie(context)
    assert cookie is not None and replay(live, cookie["value"]).status_code == 200
    tab.click("#signout")
    tab.wait_for_selector("#signin-error:has-text('Signed out.')")
    assert session_cookie(context) is None  # cleared in the browser ...
    gone = replay(live, cookie["value"])  # ... and ended on the server: a copy of the cookie is worth nothing
    assert gone.status_code == 401 and gone.headers["content-type"].startswith("application/problem+json")
    tab.reload()
    tab.wait_for_selector("#signin:not([hidden])")
    context.close()


def test_a_revoked_keys_session_ends(browser: Any, live: Live, temp_key: dict[str, Any]) -> None:  # noqa: F811
    context, tab = sign_in(browser, live, temp_key["key"])
    cookie = session_cookie(context)
    assert cookie is not None
    with live.client(live.admin_key) as admin:
        assert admin.delete(f"/keys/{temp_key['id']}").status_code == 200
    assert replay(live, cookie["value"]).status_code == 401
    assert replay(live, cookie["value"], "/console/api/keys").status_code == 401
    tab.goto(live.url + "/console#/catalog")  # the next page's API calls are refused: back to the sign-in
    tab.wait_for_selector("#signin-error:has-text('session ended')")
    assert tab.is_visible("#signin") and tab.is_hidden("#nav")
    context.close()


class ImagePage(http.server.BaseHTTPRequestHandler):
    """At http://localhost:PORT/ a page of another site than 127.0.0.1 that loads http://127.0.0.1:PORT/probe as an
    image; the headers of that load are kept (Chromium's ORB hides the answer from the page, not the request)."""

    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - the handler's method name
        if self.path == "/probe":
            self.seen.append({k.lower(): v for k, v in self.headers.items()})
            page = b"x"
        else:
            page = f'<img src="http://127.0.0.1:{self.server.server_address[1]}/probe">'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: Any) -> None:
        return None


def test_another_sites_page_loading_the_api_without_cors_is_refused(browser: Any, live: Live) -> None:  # noqa: F811
    """What Chromium sends for an image of another site's page (no Origin, `Sec-Fetch-Site: cross-site`), sent to
    the service: refused at the edge (403) before any key is asked for. In open mode each image of /events held
    one of the local user's event streams."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), ImagePage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(f"http://localhost:{server.server_address[1]}/")
        tab.wait_for_function("document.images[0].complete")
    finally:
        context.close()
        server.shutdown()
        server.server_close()
    (sent,) = ImagePage.seen
    assert sent["sec-fetch-site"] == "cross-site" and sent["sec-fetch-mode"] == "no-cors" and "origin" not in sent
    replayed = {k: v for k, v in sent.items() if k.startswith("sec-") or k in ("referer", "user-agent", "accept")}
    response = httpx.get(live.url + "/tools", headers=replayed, timeout=30)
    assert response.status_code == 403, response.text  # main: 401, the request went on to the key check
    assert response.json()["type"].endswith("/forbidden-origin")
