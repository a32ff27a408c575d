"""`Cache-Control: no-store` (and nosniff) on every API answer, refusals included, and on the event stream: a
cache between the caller and the service keeps none of them. A malformed Origin is a 403 problem like any
foreign origin (it escaped the host check as a text/plain 500 before)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.security.conftest import PROBLEM_JSON, assert_problem, bearer, serving


@pytest.mark.parametrize("origin", ["http://[::1", "http://[not-an-address]", "http://]x["])
async def test_a_malformed_origin_is_a_403_problem(world: dict[str, Any], origin: str) -> None:
    answer = await world["http"].get("/tools", headers={"Origin": origin})
    problem = assert_problem(answer, 403, "forbidden-origin")
    assert problem["detail"] == "Cross-origin requests are refused unless the origin is in policy.cors_origins"
    assert answer.headers["cache-control"] == "no-store"


async def test_refusals_and_analytics_are_not_stored(world: dict[str, Any]) -> None:
    http, admin, dev = world["http"], bearer(world["admin"]), bearer(world["dev"])
    answers = {
        "analytics": await http.get("/analytics/tools", headers=admin),
        "keys refused": await http.get("/keys", headers=dev),
        "callers": await http.get("/analytics/callers", headers=admin),
        "console me": await http.get("/console/api/me", headers=admin),
        "no route": await http.get("/no-such-route", headers=admin),
        "wrong method": await http.put("/tools", headers=admin),
        "bad body": await http.post("/search", content=b"{", headers={**admin, "content-type": "application/json"}),
        "foreign host": await http.get("/tools", headers={**admin, "host": "evil.example"}),
        "unknown result": await http.get("/results/nope", headers=dev),
    }
    statuses = {what: answer.status_code for what, answer in answers.items()}
    assert statuses == {
        "analytics": 200,
        "keys refused": 403,
        "callers": 200,
        "console me": 200,
        "no route": 404,
        "wrong method": 405,
        "bad body": 422,
        "foreign host": 421,
        "unknown result": 404,
    }
    for what, answer in answers.items():
        assert answer.headers["cache-control"] == "no-store", what
        assert answer.headers["x-content-type-options"] == "nosniff", what
        if answer.status_code >= 400:
            assert answer.headers["content-type"] == PROBLEM_JSON, what


async def test_the_event_stream_and_a_bad_origin_over_the_wire(world: dict[str, Any]) -> None:
    """Through uvicorn: the stream's headers, and what a client without a key gets for a malformed Origin."""
    async with serving(world["app"]) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        async with http.stream("GET", "/events", headers=bearer(world["dev"])) as stream:
            headers = stream.headers
        origin = await http.get("/tools", headers={"Origin": "http://[::1"})
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-store"
    assert (origin.status_code, origin.headers["content-type"]) == (403, PROBLEM_JSON)
    assert origin.headers["cache-control"] == "no-store"
