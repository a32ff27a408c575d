"""A request's key (and the role its route needs) is checked before its body is read: FastAPI reads and parses a
route's JSON body before it solves the dependencies that check the key, so a client without one had its 12 MB body
to POST /tools parsed (+330 MB of the service's memory, 1.1 s, another client's /healthz held 0.74 s) before its
401, and a dev key had a registration body parsed before its 403. Parses take one thread, one at a time: keyless
bodies held it ahead of every caller's."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from pathlib import Path
from typing import Any

from tests.security.conftest import assert_problem, bearer, opened_world

SMALL_VALUES = 1_900_000 // 4  # `[0],` a value: 1.9 MB of JSON (under the 2 MB call limit), ~475,000 lists parsed


def small_values_body(key: str) -> bytes:
    return ('{"' + key + '": [' + ",".join(["[0]"] * SMALL_VALUES) + "]}").encode()


async def post_traced(http: Any, path: str, body: bytes, headers: dict[str, str]) -> tuple[Any, int]:
    """The answer, and the most memory the app allocated at once while it answered (bytes, tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        answer = await http.post(path, content=body, headers={"content-type": "application/json", **headers})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return answer, peak - before


async def test_a_body_without_a_valid_key_is_refused_before_it_is_parsed(world: dict[str, Any]) -> None:
    http = world["http"]
    cases = [
        ("/tools", "tools", {}, 401),
        ("/execute", "arguments", {"Authorization": "Bearer tsk_not-a-key"}, 401),
        ("/search", "query", {}, 401),
        ("/run", "script", {"X-API-Key": "tsk_guess"}, 401),
    ]
    for path, key, headers, status in cases:
        body = small_values_body(key)
        answer, peak = await post_traced(http, path, body, headers)
        assert_problem(answer, status, "unauthorized")
        # Parsed, the body took ~40 MB (20 times its size) before the 401; refused first, about its own bytes.
        assert peak < 4 * len(body), f"{path}: {peak / 1e6:.1f} MB allocated for a {len(body) / 1e6:.1f} MB body"


async def test_a_body_to_a_route_the_key_may_not_use_is_refused_before_it_is_parsed(world: dict[str, Any]) -> None:
    http = world["http"]
    for path, key in [("/tools", "tools"), ("/keys", "caller"), ("/servers", "id")]:
        body = small_values_body(key)
        answer, peak = await post_traced(http, path, body, bearer(world["dev"]))
        problem = assert_problem(answer, 403, "permission-denied")
        assert problem["detail"].endswith("needs the admin role"), problem
        assert peak < 4 * len(body), f"{path}: {peak / 1e6:.1f} MB allocated for a {len(body) / 1e6:.1f} MB body"
    body = small_values_body("approval_id")
    answer, peak = await post_traced(http, "/approvals", body, bearer(world["dev"]))
    assert_problem(answer, 403, "permission-denied")
    assert peak < 4 * len(body)


async def test_a_valid_key_is_charged_once_and_its_body_still_read_strictly(tmp_path: Path) -> None:
    policy = {"rate_limit_per_minute": 0.01, "rate_limit_burst": 4}  # four requests, then a 429 for 100 minutes
    async with opened_world(tmp_path, policy=policy) as world:
        http, dev = world["http"], bearer(world["dev"])
        answer = await http.post(
            "/search",
            content=b'{"query": "weather", "query": "secret"}',
            headers={"content-type": "application/json", **dev},
        )
        problem = assert_problem(answer, 422)
        assert "appears twice" in problem["detail"], problem
        for _ in range(2):
            answer = await http.post("/search", json={"query": "weather forecast", "k": 1}, headers=dev)
            assert answer.status_code == 200 and answer.json()["results"][0]["name"] == "public__get_weather"
        answer = await http.post("/execute", json={"name": "public__get_weather", "arguments": {}}, headers=dev)
        assert answer.status_code != 429, answer.text  # the fourth request: each took one token, not two
        # The refused body took its token too (its key was checked first): a malformed body cost nothing before.
        assert_problem(await http.post("/search", json={"query": "weather"}, headers=dev), 429, "rate-limited")


async def test_the_console_sign_in_reads_a_key_not_megabytes(world: dict[str, Any]) -> None:
    """The sign-in is read before any key is known, and holds one key: a body past 4 KiB is a 413 unread."""
    http, console = world["http"], {"X-Toolscout-Console": "1"}
    body = small_values_body("key")
    answer, peak = await post_traced(http, "/console/api/session", body, console)
    problem = assert_problem(answer, 413, "payload-too-large")
    assert (problem["max_bytes"], problem["limit"]) == (4096, "the console's sign-in, one key"), problem
    assert peak < 4 * len(body), f"{peak / 1e6:.1f} MB allocated for a {len(body) / 1e6:.1f} MB body"
    # Before: parsed whole (50 MB), then a 422 for a key that is no string.
    signed_in = await http.post("/console/api/session", json={"key": world["dev"]}, headers=console)
    assert signed_in.status_code == 200 and signed_in.json()["caller"] == "dev-agent", signed_in.text


async def test_one_keys_long_bodies_take_the_parse_thread_in_turn_with_other_callers(tmp_path: Path) -> None:
    """Long bodies are parsed on one thread; its callers take it in turn. First come, first served, a dev key's six
    1.9 MB bodies (each a token of its rate limit) held an admin's 120 KB call behind all six: on a live service,
    4 connections of them held it at 4.5 s (p50; 50 ms without). Bodies cost a token each here, as they did then
    (they cost one per 64 KiB now: tests/security/test_body_cost.py)."""
    async with opened_world(tmp_path, policy={"body_kib_per_token": 0}) as world:
        await _long_bodies_take_turns(world)


async def _long_bodies_take_turns(world: dict[str, Any]) -> None:
    http, dev, admin = world["http"], bearer(world["dev"]), bearer(world["admin"])
    # Objects: the parser's hook for each lets the event loop in, so the admin's call is read while the six wait.
    flood = ('{"query": [' + ",".join(['{"a":0}'] * (1_900_000 // 8)) + "]}").encode()
    finished: list[str] = []

    async def post(who: str, path: str, body: bytes, headers: dict[str, str]) -> int:
        answer = await http.post(path, content=body, headers={"content-type": "application/json", **headers})
        finished.append(who)
        return answer.status_code

    floods = [asyncio.create_task(post(f"dev{i}", "/search", flood, dev)) for i in range(6)]
    await asyncio.sleep(0.1)  # the six are read and wait for the parse thread (each parse takes longer)
    arguments = {"city": "Paris", "notes": ["x" * 10] * 8000}  # ~120 KB: parsed on that thread too
    call = json.dumps({"name": "public__get_weather", "arguments": arguments}).encode()
    assert await post("admin", "/execute", call, admin) != 500
    assert await asyncio.gather(*floods) == [422] * 6
    # First come, first served, the admin's call came last, after all six. In turn it waits for the dev parse under
    # way (and one that took the thread while its own 120 KB were read): most of the six are parsed after it.
    assert len(finished) - 1 - finished.index("admin") >= 2, finished
