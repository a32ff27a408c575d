"""Rate limits that hold: a batch pays for every call, and wrong keys slow their sender without costing queries."""

from __future__ import annotations

from pathlib import Path

import httpx
from sqlalchemy import event

from service.db.models import Execution
from service.execution.runtime import get_gateway
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running


async def test_a_batch_costs_one_token_per_call(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"rate_limit_per_minute": 1, "rate_limit_burst": 5})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        calls = {"calls": [{"name": f"none__tool_{i}"} for i in range(10)]}
        refused = await http.post("/execute/batch", json=calls, headers=bearer(admin))
        body = assert_problem(refused, 429, "rate-limited")
        assert "10 calls" in body["detail"] and int(refused.headers["retry-after"]) >= 1
        await get_gateway(app.state.resources).log.flush()
        assert await count_rows(app, Execution) == 0  # not one of the calls ran
        # Four calls fit in what is left of the burst (the request itself took one token).
        small = await http.post("/execute/batch", json={"calls": calls["calls"][:4]}, headers=bearer(admin))
        assert small.status_code == 200 and small.json()["failed"] == 4


async def test_wrong_keys_are_slowed_per_address_and_stop_costing_queries(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"auth_failures_free": 3})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        key_queries: list[str] = []
        engine = app.state.resources.engine.sync_engine

        def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
            if "api_keys" in statement:
                key_queries.append(statement)

        event.listen(engine, "before_cursor_execute", record)
        try:
            for i in range(4):  # three free failures, then the fourth imposes a delay
                assert_problem(await http.get("/tools", headers=bearer(f"tsk_guess_{i}")), 401, "unauthorized")
            queries = len(key_queries)
            blocked = await http.get("/tools", headers=bearer("tsk_guess_next"))
            assert_problem(blocked, 429, "rate-limited")
            assert int(blocked.headers["retry-after"]) >= 1
            for i in range(20):
                assert (await http.get("/tools", headers=bearer(f"tsk_more_{i}"))).status_code == 429
            assert len(key_queries) == queries  # guesses while blocked never reach the database
        finally:
            event.remove(engine, "before_cursor_execute", record)
        # Another address is not affected.
        other = httpx.ASGITransport(app=app, client=("192.0.2.7", 4000))
        async with httpx.AsyncClient(transport=other, base_url="http://localhost") as elsewhere:
            assert (await elsewhere.get("/tools", headers=bearer(admin))).status_code == 200


def test_failure_delay_doubles_and_is_bounded() -> None:
    from service.security.auth_failures import FailedAuthLimiter

    now = [0.0]
    limiter = FailedAuthLimiter(free=2, max_delay=8.0, clock=lambda: now[0])
    delays = [limiter.failed("a") for _ in range(8)]
    assert delays == [0.0, 0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert limiter.wait("a") == 8.0 and limiter.wait("b") == 0.0
    limiter.succeeded("a")
    assert limiter.wait("a") == 0.0
