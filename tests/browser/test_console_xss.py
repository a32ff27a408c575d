"""Stored XSS against the console: tools, server ids, schemas, tags, caller ids, search queries, tool results and
error texts carrying HTML and script payloads are put in through the API, then every page is rendered in
Chromium. No payload may run (each sets `window.__pwned` or adds an element with id `pwned`), and each text is
shown literally. Runs after test_console.py (it adds tools, callers and searches to the shared service)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.browser.conftest import Live, wait_for
from tests.browser.test_console import browser, open_page  # noqa: F401 (the module's browser fixture)

playwright_sync = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.browser, pytest.mark.upstream, pytest.mark.model]

RUN = "window.__pwned=1;document.body.append(Object.assign(document.createElement('b'),{id:'pwned'}))"
IMG = f'<img src=x onerror="{RUN}">'
SVG = f'"><svg onload="{RUN}"><b id=pwned>'
SCRIPT = f"</script><script>{RUN}</script>"
JS_URL = f"javascript:{RUN}"
# Bidirectional controls and zero-width characters are refused at registration (indexer/screening.py).
BIDI = "safe<img src=x onerror=window.__pwned=1>"
SERVER = "evil<img src=x onerror=window.__pwned=1>"
TOOL = f"steal{SVG}"[:200]
DESCRIPTION = f"Convert celsius temperature {IMG} {SCRIPT} {JS_URL} {BIDI}"
CALLER = "mallory<svg onload=window.__pwned=1>"
QUERY = f"zzqx {IMG} {SCRIPT}"


@pytest.fixture(scope="module")
def hostile(live: Live) -> Iterator[dict[str, Any]]:
    """The payloads put into the service: a catalog server and tool, a caller, searches, calls and an approval."""
    with live.client(live.admin_key) as admin:
        registered = admin.post(
            "/tools",
            json={
                "tools": [
                    {
                        "server": SERVER,
                        "name": TOOL,
                        "description": DESCRIPTION,
                        "tags": [IMG[:64], JS_URL[:64]],
                        "annotations": {"title": IMG, "destructiveHint": True},
                        "input_schema": {
                            "type": "object",
                            "properties": {
                                SVG: {"type": "string", "description": IMG, "default": SCRIPT, "format": SVG},
                                "mode": {"enum": [IMG, JS_URL], "description": SCRIPT},
                                "count": {"type": "integer", "default": SVG},
                                "blob": {"type": "object", "default": {"x": SCRIPT}},
                            },
                            "required": [SVG],
                        },
                    }
                ],
                "servers": {SERVER: {"title": IMG, "description": SVG, "instructions": SCRIPT}},
            },
        )
        assert registered.status_code == 200, registered.text
        [name] = registered.json()["tools"]
        created = admin.post("/keys", json={"caller": CALLER, "roles": []})
        assert created.status_code == 201 or created.status_code == 200, created.text
        key = created.json()
    with live.client(key["key"]) as mallory:
        for _ in range(3):  # a search that finds nothing: shown under "Top queries without result"
            nothing = mallory.post("/search", json={"query": QUERY, "servers": ["no-such-server"]})
            assert nothing.status_code == 200 and nothing.json()["results"] == [], nothing.text
        assert mallory.post("/execute", json={"name": "t__echo", "arguments": {"text": IMG}}).status_code == 200
        assert mallory.post("/execute", json={"name": "t__fail", "arguments": {"reason": SVG}}).status_code == 200
        pending = mallory.post("/execute", json={"name": "t__big", "arguments": {"lines": 2}})
        assert pending.status_code == 403, pending.text
    with live.client(live.admin_key) as admin:
        wait_for(
            lambda: any(q["query"] == QUERY for q in admin.get("/analytics/searches/unanswered").json()["queries"]),
            30,
            "the unanswered search",
        )
        wait_for(
            lambda: any(c["caller"] == CALLER for c in admin.get("/analytics/callers").json()["callers"]),
            30,
            "the caller's calls",
        )
        tool = admin.get(f"/tools/{name}").json()
    yield {
        "name": name,
        "server": tool["server"],
        "tool": tool["tool"],
        "key": key,
        "approval_id": pending.json()["approval_id"],
    }
    with live.client(live.admin_key) as admin:
        admin.delete(f"/tools/{name}")
        admin.delete(f"/keys/{key['id']}")


@pytest.fixture
def tab(browser: Any, live: Live) -> Iterator[Any]:  # noqa: F811
    """A tab signed in as the admin that fails the test on any page error or dialog."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    trouble: list[str] = []
    page.on("pageerror", lambda err: trouble.append(f"pageerror: {err}"))
    page.on("dialog", lambda dialog: (trouble.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.goto(live.url + "/console")
    page.fill("#signin-key", live.admin_key)
    page.click("#signin-form button")
    page.wait_for_selector("#nav:not([hidden])")
    yield page
    context.close()
    assert not trouble, trouble


def assert_clean(page: Any) -> None:
    page.wait_for_timeout(300)  # an onerror of a broken image fires after the load
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#pwned").count() == 0
    assert page.locator("#page img, #page script, #page iframe, #page svg b").count() == 0
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    assert not [h for h in hrefs if not h.startswith("#")], hrefs


def test_catalog_shows_hostile_tools_as_text(tab: Any, live: Live, hostile: dict[str, Any]) -> None:
    open_page(tab, live, "catalog")
    assert hostile["server"] == "evil_img_src_x_onerror_window___pwned_1"  # server ids are made MCP-safe
    assert hostile["tool"] == TOOL  # the tool's own name is kept as given
    row = tab.locator(f'#servers-table tbody tr[data-server="{hostile["server"]}"]')
    assert row.locator("td").first.text_content() == hostile["server"]
    tab.fill("#tool-filter", "celsius temperature")
    link = tab.locator(".tool-link").filter(has_text="steal")
    assert link.get_attribute("data-name") == hostile["name"] and link.text_content() == TOOL
    link.click()
    assert tab.text_content("#tool-detail h3") == hostile["name"]
    assert tab.text_content("#tool-detail p") == DESCRIPTION
    assert tab.eval_on_selector_all("#tool-detail .badge", "els => els.map(e => e.textContent)") == [
        IMG[:64],
        JS_URL[:64],
    ]
    assert_clean(tab)


def test_playground_renders_hostile_results_forms_and_outputs(tab: Any, live: Live, hostile: dict[str, Any]) -> None:
    open_page(tab, live, "playground", "?q=" + quote(SCRIPT))
    assert tab.input_value("#query") == SCRIPT
    tab.fill("#query", "convert celsius temperature")
    tab.click("#search-form button")
    result = tab.locator(f'#results li.result[data-name="{hostile["name"]}"]')
    result.wait_for()
    assert result.locator("p.desc").text_content() == DESCRIPTION
    result.locator("button.try").click()
    tab.wait_for_selector("#call-form")
    labels = tab.eval_on_selector_all("#call-form label", "els => els.map(e => e.firstChild.textContent)")
    assert labels == [SVG, "mode", "count", "blob"]
    assert tab.eval_on_selector_all("#call-form small", "els => els.map(e => e.textContent)") == [IMG, SCRIPT]
    assert tab.eval_on_selector_all("#call-form option", "els => els.map(e => e.textContent)")[-2:] == [IMG, JS_URL]
    assert tab.locator("#call-form input[type=text]").input_value() == SCRIPT
    assert_clean(tab)
    # A tool result and a tool error carrying markup are shown as text.
    tab.fill("#query", "t__echo")
    tab.click("#search-form button")
    tab.wait_for_selector('#results li.result:first-child[data-name="t__echo"]')
    tab.click("#results li.result:first-child button.try")
    tab.fill("#arg-text", IMG)
    tab.click("#call-form button[type=submit]")
    tab.wait_for_selector("#call-output .call-status")
    assert tab.text_content("#call-output pre.call-result") == IMG
    tab.fill("#query", "t__fail")
    tab.click("#search-form button")
    tab.wait_for_selector('#results li.result:first-child[data-name="t__fail"]')
    tab.click("#results li.result:first-child button.try")
    tab.fill("#arg-reason", SVG)
    tab.click("#call-form button[type=submit]")
    tab.wait_for_selector("#call-output .call-status")
    assert SVG in tab.text_content("#call-output pre.call-result")
    assert_clean(tab)


def test_overview_approvals_and_keys_show_hostile_queries_and_callers(
    tab: Any, live: Live, hostile: dict[str, Any]
) -> None:
    open_page(tab, live, "overview")
    queries = tab.eval_on_selector_all("#zero-table tbody tr", "rows => rows.map(r => r.cells[0].textContent)")
    assert QUERY in queries
    assert_clean(tab)
    open_page(tab, live, "approvals")
    row = tab.locator(f'#pending-table tbody tr[data-id="{hostile["approval_id"]}"]')
    assert row.locator("td").nth(1).text_content() == CALLER
    assert_clean(tab)
    open_page(tab, live, "keys")
    assert CALLER in tab.eval_on_selector_all("#keys-table tbody tr", "rows => rows.map(r => r.dataset.caller)")
    assert CALLER in tab.eval_on_selector_all(
        "#callers-table tbody tr", "rows => rows.map(r => r.cells[0].textContent)"
    )
    assert_clean(tab)


@pytest.mark.parametrize("path", ["/console", "/console/static/index.html", "/console/static/core.js"])
def test_every_console_response_carries_the_security_headers(live: Live, path: str) -> None:
    with live.client(live.admin_key) as client:
        response = client.get(path)
    assert response.status_code == 200
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert "frame-ancestors 'none'" in policy and "require-trusted-types-for 'script'" in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"


def test_the_console_cannot_be_framed(browser: Any, live: Live) -> None:  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    page.set_content(
        f'<iframe id="a" src="{live.url}/console"></iframe><iframe id="b" src="{live.url}/console/static/index.html">'
    )
    page.wait_for_timeout(1500)
    framed = [f for f in page.frames if f != page.main_frame]
    assert len(framed) == 2
    for frame in framed:  # a blocked frame shows Chromium's error page, not the sign-in form
        assert frame.query_selector("#signin-form") is None, frame.url
    context.close()


def test_strings_cannot_become_html_in_the_console(tab: Any, live: Live) -> None:
    open_page(tab, live, "overview")
    refused = tab.evaluate(
        """() => { try { document.body.insertAdjacentHTML("beforeend", "<b id=pwned></b>"); return "inserted"; }
                   catch (e) { return e.name; } }"""
    )
    assert refused == "TypeError"  # Trusted Types: no policy exists, so no string reaches an HTML sink
    assert tab.locator("#pwned").count() == 0


@pytest.mark.parametrize("name", ["constructor", "__proto__", "hasOwnProperty"])
def test_a_page_name_from_the_prototype_shows_the_overview(tab: Any, live: Live, name: str) -> None:
    tab.goto(f"{live.url}/console#/{name}")
    tab.reload()
    tab.wait_for_selector(f'.page[data-page="{name}"][aria-busy="false"]')
    assert tab.title() == "Overview · Toolscout"
    assert tab.locator("#tile-calls").count() == 1
