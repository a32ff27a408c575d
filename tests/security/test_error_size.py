"""A request's validation problem is bounded whatever the body: the first 20 errors, `more_errors`, and pointers cut
as a path is. A 1.2 MB /search body of 100,000 keys no route takes was answered with every error, in `detail` and
in `errors` alike: 11.5 MB in 1.9 s (in process), for one request within the call-body bound."""

from __future__ import annotations

import json
import time
from typing import Any

from service.errors import MAX_INSTANCE_CHARS, MAX_REPORTED_ERRORS
from tests.security.conftest import assert_problem, bearer


async def test_a_body_of_many_unknown_keys_gets_a_bounded_problem(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    body = json.dumps({"query": "weather", **{f"k{i}": 1 for i in range(100_000)}})
    began = time.perf_counter()
    answer = await http.post("/search", content=body, headers={**bearer(dev), "Content-Type": "application/json"})
    took = time.perf_counter() - began
    problem = assert_problem(answer, 422, "invalid-request")
    assert [e["pointer"] for e in problem["errors"]] == [f"/body/k{i}" for i in range(MAX_REPORTED_ERRORS)]
    assert problem["more_errors"] is True and "there are more" in problem["detail"]
    assert len(answer.content) < 10_000 and took < 1.0, (len(answer.content), took)


async def test_a_long_unknown_key_is_not_echoed_in_full(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    key = "k" * 500_000
    answer = await http.post("/search", json={"query": "weather", key: 1}, headers=bearer(dev))
    problem = assert_problem(answer, 422, "invalid-request")
    assert problem["errors"] == [
        {"pointer": f"/body/{key[: MAX_INSTANCE_CHARS - 6]}...", "reason": problem["errors"][0]["reason"]}
    ]
    assert "more_errors" not in problem and len(answer.content) < 5_000, len(answer.content)


async def test_a_few_errors_are_all_listed(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    answer = await http.post("/search", json={"query": "", "k": "x", "explain": 3}, headers=bearer(dev))
    problem = assert_problem(answer, 422, "invalid-request")
    assert {e["pointer"] for e in problem["errors"]} == {"/body/query", "/body/k", "/body/explain"}
    assert "more_errors" not in problem
