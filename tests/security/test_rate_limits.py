"""Rate limits that hold: a batch pays for every call, and wrong keys slow their sender without costing queries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from service.db.models import Execution
from service.execution.runtime import get_gateway
from service.policy.console_sessions import COOKIE
from service.policy.keys import key_resolver
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running, statements


async def test_a_batch_costs_one_token_per_call(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"rate_limit_per_minute": 1, "rate_limit_burst": 10})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        for _ in range(5):  # half the bucket spent
            assert (await http.get("/tools", headers=bearer(admin))).status_code == 200
        calls = {"calls": [{"name": f"none__tool_{i}"} for i in range(10)]}
        refused = await http.post("/execute/batch", json=calls, headers=bearer(admin))
        body = assert_problem(refused, 429, "rate-limited")
        assert "10 calls" in body["detail"] and int(refused.headers["retry-after"]) >= 1
        await get_gateway(app.state.resources).log.flush()
        assert await count_rows(app, Execution) == 0  # not one of the calls ran
        # Four calls fit in what is left of the burst (the request itself took one token).
        small = await http.post("/execute/batch", json={"calls": calls["calls"][:4]}, headers=bearer(admin))
        assert small.status_code == 200 and small.json()["failed"] == 4


async def test_a_batch_larger_than_the_burst_is_refused_as_invalid_not_told_to_retry(tmp_path: Path) -> None:
    # A batch of more calls than a bucket holds could never be paid for: it got 429 with `Retry-After: 1` on every
    # attempt (61 calls under the defaults, where a batch may hold 100: 4 tries over 25 s, all refused).
    settings = make_settings(tmp_path, permissions=None, policy={"rate_limit_per_minute": 600, "rate_limit_burst": 5})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        calls = [{"name": f"none__tool_{i}"} for i in range(6)]
        refused = await http.post("/execute/batch", json={"calls": calls}, headers=bearer(admin))
        body = assert_problem(refused, 422)
        assert body["limit"] == "policy.rate_limit_burst" and "retry-after" not in refused.headers
        assert body["errors"] == [{"pointer": "/body/calls", "reason": "at most 5 calls (policy.rate_limit_burst)"}]
        await get_gateway(app.state.resources).log.flush()
        assert await count_rows(app, Execution) == 0
        # As many calls as the burst holds run once the bucket has refilled (the refused batch took one token).
        await anyio.sleep(0.2)
        fits = await http.post("/execute/batch", json={"calls": calls[:5]}, headers=bearer(admin))
        assert fits.status_code == 200 and fits.json()["failed"] == 5, fits.text


def query_of(chars: int) -> str:
    """A query of exactly `chars` characters, of words (several intents, as a long request reads)."""
    return ("read the newest file, then email the summary to my team and " * (chars // 60 + 1))[: chars - 1] + "x"


async def test_a_long_search_takes_more_of_the_keys_bucket_than_a_short_one(tmp_path: Path) -> None:
    # One key sending 8,000-character searches 8 at a time raised another caller's p90 from 33 to 554 ms: each
    # cost ~96 ms of CPU against ~9 for a short one, yet one token like it. Now one token per 1,000 characters.
    settings = make_settings(tmp_path, permissions=None, policy={"rate_limit_per_minute": 1, "rate_limit_burst": 10})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        long_query = {"query": query_of(3500)}  # 4 tokens
        for _ in range(2):  # 8 of the 10 tokens
            assert (await http.post("/search", json=long_query, headers=bearer(admin))).status_code == 200
        refused = await http.post("/search", json=long_query, headers=bearer(admin))  # its request took a 9th
        body = assert_problem(refused, 429, "rate-limited")
        assert body["limit"] == "policy.search_chars_per_token" and body["cost"] == 4
        assert "3500 characters costs 4 rate-limit tokens" in body["detail"]
        assert int(refused.headers["retry-after"]) >= 1
        # The refused search took no more than its request's token: one short search still fits, then none.
        assert (await http.post("/search", json={"query": "read a file"}, headers=bearer(admin))).status_code == 200
        assert_problem(await http.post("/search", json={"query": "read a file"}, headers=bearer(admin)), 429)


async def test_short_searches_cost_one_token_each_and_the_longest_at_most_the_burst(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"rate_limit_per_minute": 1, "rate_limit_burst": 5})
    async with running(settings) as (app, http):
        resolver = key_resolver(app.state.resources)
        assert [resolver.search_cost(query_of(n)) for n in (1, 999, 1000, 1001, 3000, 8000)] == [1, 1, 1, 2, 3, 5]
        admin = await cli_key(app, "root", ["admin"])
        # 8,000 characters would be 8 tokens: capped at the bucket's 5, it is paid for, never refused for ever.
        assert (await http.post("/search", json={"query": query_of(8000)}, headers=bearer(admin))).status_code == 200
        assert_problem(await http.post("/search", json={"query": "read a file"}, headers=bearer(admin)), 429)
    settings = make_settings(tmp_path, permissions=None, policy={"rate_limit_per_minute": 1, "rate_limit_burst": 5})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        for _ in range(5):  # under 1,000 characters a search is one token, as before
            assert (await http.post("/search", json={"query": query_of(999)}, headers=bearer(admin))).status_code == 200
        assert_problem(await http.post("/search", json={"query": "read a file"}, headers=bearer(admin)), 429)


# A wrong credential of each kind: how it is presented, the requests that present it, the table its lookup reads.
GUESSES: dict[str, tuple[Callable[[str], dict[str, str]], list[tuple[str, str]], str]] = {
    "api key": (lambda guess: bearer(f"tsk_{guess}"), [("GET", "/tools")], "api_keys"),
    # An unknown console session id is a failed authentication too, and so is signing out of one.
    "console session": (
        lambda guess: {"X-Toolscout-Console": "1", "Cookie": f"{COOKIE}={guess}"},
        [("GET", "/console/api/tools"), ("DELETE", "/console/api/session")],
        "console_sessions",
    ),
}


@pytest.mark.parametrize("kind", GUESSES)
async def test_wrong_credentials_are_slowed_per_address_and_stop_costing_queries(tmp_path: Path, kind: str) -> None:
    present, requests, table = GUESSES[kind]
    settings = make_settings(tmp_path, permissions=None, policy={"auth_failures_free": 3})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        method, path = requests[0]
        with statements(app, lambda statement: table in statement) as lookups:
            for i in range(4):  # three free failures, then the fourth imposes a delay
                assert_problem(await http.request(method, path, headers=present(f"guess-{i}")), 401, "unauthorized")
            queries = len(lookups)
            blocked = await http.request(method, path, headers=present("guess-next"))
            assert_problem(blocked, 429, "rate-limited")
            assert int(blocked.headers["retry-after"]) >= 1
            for i in range(20):
                for method, path in requests:
                    assert (await http.request(method, path, headers=present(f"more-{i}"))).status_code == 429
            assert len(lookups) == queries  # guesses while blocked never reach the database
        # Another address is not affected.
        other = httpx.ASGITransport(app=app, client=("192.0.2.7", 4000))
        async with httpx.AsyncClient(transport=other, base_url="http://localhost") as elsewhere:
            assert (await elsewhere.get(requests[0][1], headers=bearer(admin))).status_code == 200


async def test_a_valid_key_between_guesses_does_not_reset_the_wait(tmp_path: Path) -> None:
    """A success forgot its address's failures: a holder of any key (a dev's) made four guesses at others' keys, one
    request of its own, four more guesses ... (240 guesses in 300 requests on a live service, none slowed)."""
    settings = make_settings(tmp_path, permissions=None, policy={"auth_failures_free": 3})
    async with running(settings) as (app, http):
        dev = await cli_key(app, "dev", ["dev"])
        statuses = []
        for i in range(3):
            for j in range(3):
                statuses.append((await http.get("/tools", headers=bearer(f"tsk_guess-{i}-{j}"))).status_code)
            statuses.append((await http.get("/tools", headers=bearer(dev))).status_code)
    # Three free guesses and the dev's own request; the fourth guess imposes a wait that every request then meets,
    # the dev's own included, as it does for an address that never presented a valid key.
    assert statuses == [401, 401, 401, 200, 401, 429, 429, 429, 429, 429, 429, 429], statuses


def test_failures_are_forgotten_after_a_quiet_while_not_after_a_success() -> None:
    from service.security.auth_failures import FailedAuthLimiter

    now = [0.0]
    limiter = FailedAuthLimiter(free=2, max_delay=8.0, clock=lambda: now[0])
    assert [limiter.failed("a") for _ in range(2)] == [0.0, 0.0]
    now[0] = 8.0
    assert limiter.failed("a") == 1.0  # within the quiet while: the third failure of three
    now[0] = 9.0 + 8.0 + 0.1  # quiet for longer than max_delay after its wait
    assert limiter.wait("a") == 0.0 and limiter.failed("a") == 0.0  # forgotten: a first failure again
    # Fewer failures than the free ones are forgotten after the same quiet while (a success used to be what
    # forgot them, so they stayed until one came).
    now[0] = 30.0
    assert [limiter.failed("a") for _ in range(2)] == [0.0, 0.0]


def test_failure_delay_doubles_and_is_bounded() -> None:
    from service.security.auth_failures import FailedAuthLimiter

    now = [0.0]
    limiter = FailedAuthLimiter(free=2, max_delay=8.0, clock=lambda: now[0])
    delays = [limiter.failed("a") for _ in range(8)]
    assert delays == [0.0, 0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert limiter.wait("a") == 8.0 and limiter.wait("b") == 0.0
