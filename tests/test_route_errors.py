"""A route that does not exist, or exists for another method, says what was asked and where the routes are:
Starlette's bare "Not Found" and "Method Not Allowed" told a newcomer's `curl .../search` (a GET) nothing."""

from __future__ import annotations

import httpx


async def test_a_get_of_a_post_route_names_the_method_it_takes(client: httpx.AsyncClient) -> None:
    response = await client.get("/search")
    assert response.status_code == 405 and response.headers["content-type"] == "application/problem+json"
    assert response.headers["allow"] == "POST"
    body = response.json()
    assert body["title"] == "Method not allowed" and body["type"].endswith("/method-not-allowed")
    assert body["detail"] == "GET is not a method of /search: it takes POST"


async def test_an_unknown_route_points_to_the_openapi_document_and_the_nearest_route(
    client: httpx.AsyncClient,
) -> None:
    """The CLI's `analytics unanswered` and `never-found` are /analytics/searches/unanswered and
    /analytics/tools/never-found: a user who guessed the path from the command got only "Nothing at"."""
    said = {
        "/serch": "Nothing at /serch (did you mean /search?): the API's routes are in /openapi.json",
        "/analytics/unanswered": (
            "Nothing at /analytics/unanswered (did you mean /analytics/searches/unanswered?): the API's routes are in "
            "/openapi.json"
        ),
        "/analytics/never-found": (
            "Nothing at /analytics/never-found (did you mean /analytics/tools/never-found?): the API's routes are in "
            "/openapi.json"
        ),
        "/nothing/like/any/route": "Nothing at /nothing/like/any/route: the API's routes are in /openapi.json",
    }
    for path, detail in said.items():
        response = await client.post(path, json={"query": "time"}) if path == "/serch" else await client.get(path)
        assert (response.status_code, response.json()["detail"]) == (404, detail)


async def test_the_docs_ui_while_off_says_which_setting_serves_it(client: httpx.AsyncClient) -> None:
    for path in ("/docs", "/redoc"):
        response = await client.get(path)
        assert response.status_code == 404
        assert response.json()["detail"].startswith(
            "Swagger UI (/docs) and ReDoc (/redoc) are off: TOOLSCOUT_DOCS_UI=true serves them"
        )


async def test_a_missing_tool_keeps_its_own_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/tools/nothing__here")
    assert response.status_code == 404 and response.json()["detail"].startswith("No tool named 'nothing__here'")


async def test_a_body_field_the_route_does_not_define_names_its_fields_and_the_nearest(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/search", json={"query": "time", "server": ["time"]})
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {
            "pointer": "/body/server",
            "reason": "Extra inputs are not permitted (its fields: query, k, servers, tags, explain; did you mean "
            "servers?)",
        }
    ]
    response = await client.post("/execute/batch", json={"calls": [{"name": "x", "argumentz": {}}]})
    reason = response.json()["errors"][0]["reason"]
    assert response.json()["errors"][0]["pointer"] == "/body/calls/0/argumentz"
    assert reason.startswith("Extra inputs are not permitted (its fields: name, arguments,")
    assert reason.endswith("; did you mean arguments?)")


async def test_another_apis_name_for_a_field_is_pointed_at_ours(client: httpx.AsyncClient) -> None:
    """Anthropic's tool_use block holds `input`, other gateways `tool` or `top_k`: far from our names in spelling,
    they were told the route's fields with no nearest."""
    said = {
        ("/execute", '{"name": "time__get_current_time", "input": {}}'): (
            "/body/input",
            "name, arguments, search_id, approval_id; did you mean arguments?",
        ),
        ("/execute", '{"name": "x", "tool": "time__get_current_time"}'): (
            "/body/tool",
            "name, arguments, search_id, approval_id; did you mean name?",
        ),
        ("/search", '{"query": "time", "top_k": 3}'): ("/body/top_k", "query, k, servers, tags, explain; did you mean k?"),
        ("/search", '{"query": "time", "unrelated": 3}'): ("/body/unrelated", "query, k, servers, tags, explain"),
    }
    for (route, body), (pointer, fields) in said.items():
        response = await client.post(route, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 422, body
        extra = [e for e in response.json()["errors"] if e["pointer"] == pointer]
        assert extra == [{"pointer": pointer, "reason": f"Extra inputs are not permitted (its fields: {fields})"}]


async def test_the_root_sends_a_browser_to_the_console_and_tells_a_client_where_to_look(
    client: httpx.AsyncClient,
) -> None:
    """Opening http://127.0.0.1:8765/ was a 404 problem, in a browser too."""
    from service import version

    browser = await client.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert browser.status_code == 303 and browser.headers["location"] == "/console"
    response = await client.get("/", headers={"Accept": "application/json"})
    assert response.status_code == 200
    assert response.json() == {
        "service": "toolscout",
        "version": version(),
        "console": "/console",
        "openapi": "/openapi.json",
        "health": "/healthz",
        "ready": "/readyz",
    }
    assert (await client.get("/openapi.json")).json()["info"]["version"] == version()


async def test_the_openapi_document_is_the_apps_encoded_once(client: httpx.AsyncClient) -> None:
    """FastAPI encoded its 146 KB document again for every keyless request; the bytes are kept now, the same
    document (what schemathesis and the Swagger UI read)."""
    app = client._transport.app  # type: ignore[attr-defined]
    first, second = await client.get("/openapi.json"), await client.get("/openapi.json")
    assert first.status_code == second.status_code == 200
    assert first.headers["content-type"] == "application/json"
    assert first.json() == app.openapi() and first.content == second.content
    assert [getattr(r, "path", None) for r in app.router.routes].count("/openapi.json") == 1


def test_the_version_is_the_installed_distributions() -> None:
    import tomllib
    from importlib import metadata
    from pathlib import Path

    from service import version

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert version() == metadata.version("toolscout") == pyproject["project"]["version"]
