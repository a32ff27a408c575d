"""Every JSON body is read by the one strict parser (service/security/json_body.py), not only /tools' and /execute's.

FastAPI's own reader (the standard library's, defaults) kept the last of a key given twice and let NaN and Infinity
through: `{"script": "return 1", "script": "<another program>"}` ran the second program on /run while a proxy, a
log or a reviewer reading the first saw the first (a parser differential), an approval granted in advance was bound
to the last of two values of one argument, and `POST /keys` made a key of the last `roles` given."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

from service.db.models import ApiKey, Approval
from service.security.json_body import StrictJsonBodyRoute
from tests.security.conftest import assert_problem, bearer, count_rows

JSON = {"content-type": "application/json"}


def refused_as(body: dict[str, Any], reason: str) -> None:
    assert body["errors"] == [{"pointer": "/body", "reason": f"not valid JSON: {reason}"}], body


async def test_a_key_given_twice_or_a_number_json_lacks_is_refused_on_every_route(world: dict[str, Any]) -> None:
    app, http = world["app"], world["http"]
    dev, admin, approver = bearer(world["dev"]), bearer(world["admin"]), bearer(world["approver"])
    twice = "the key '{}' appears twice in one object"
    cases = [
        (
            "/run",
            dev,
            b'{"script": "return 1", "script": "return tools.util__purge_cache({})"}',
            twice.format("script"),
        ),
        ("/search", dev, b'{"query": "weather", "query": "vault secrets"}', twice.format("query")),
        ("/search", dev, b'{"query": "weather", "k": NaN}', "NaN is not a JSON number"),
        ("/run", dev, b'{"script": "return 1", "timeout_seconds": Infinity}', "Infinity is not a JSON number"),
        ("/keys", admin, b'{"caller": "intern", "roles": ["dev"], "roles": ["admin"]}', twice.format("roles")),
        (
            "/approvals",
            approver,
            b'{"caller": "dev-agent", "tool": "util__purge_cache", "arguments": {"service": "web", "service": "db"}}',
            twice.format("service"),
        ),
        (
            "/servers",
            admin,
            b'{"id": "x", "url": "https://example.com/mcp", "url": "http://127.0.0.1/"}',
            twice.format("url"),
        ),
        ("/console/api/session", {"X-Toolscout-Console": "1"}, b'{"key": "a", "key": "b"}', twice.format("key")),
    ]
    keys_before = await count_rows(app, ApiKey)
    for path, headers, content, reason in cases:
        answer = await http.post(path, content=content, headers={**headers, **JSON})
        refused_as(assert_problem(answer, 422, "invalid-request"), reason)
    assert await count_rows(app, ApiKey) == keys_before
    assert await count_rows(app, Approval) == 0
    # A body read once is the same on a route that answers it: the strict reader keeps what JSON means.
    ran = await http.post("/run", content=b'{"script": "return 1 + 1"}', headers={**dev, **JSON})
    assert ran.status_code == 200 and ran.json()["result"] == 2, ran.text


def api_routes(routes: list[Any]) -> list[APIRoute]:
    """The app's API routes, those of included routers too (FastAPI keeps an included router whole)."""
    found: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif (included := getattr(route, "original_router", None)) is not None:
            found.extend(api_routes(included.routes))
    return found


def test_every_route_that_reads_a_body_reads_it_strictly(world: dict[str, Any]) -> None:
    """A route added later with a body and FastAPI's reader fails here, not in an attack."""
    routes = api_routes(world["app"].routes)
    with_body = {route.path for route in routes if route.body_field is not None}
    assert {"/run", "/search", "/keys", "/approvals", "/servers", "/execute", "/tools"} <= with_body
    lax = [
        route.path for route in routes if route.body_field is not None and not isinstance(route, StrictJsonBodyRoute)
    ]
    assert lax == []
