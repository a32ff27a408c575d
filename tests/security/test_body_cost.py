"""A request body costs rate-limit tokens by its size, charged before it is parsed: one per started
`policy.body_kib_per_token` KiB. Python's parser holds the GIL for a whole list-heavy body (164 ms for 1.9 MB of
`[0]`), so one dev key's flood of them, one token each, held an admin's one-line /execute behind them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from service.db.models import Execution
from service.execution.runtime import get_gateway
from tests.security.conftest import assert_problem, bearer, count_rows, opened_world

LIMITS = {"rate_limit_per_minute": 600, "rate_limit_burst": 60}  # the defaults, stated: the test counts tokens
FLOOD = 12


def list_heavy_call(size: int) -> bytes:
    """An /execute body of about `size` bytes whose arguments are `[0]` lists: parsed without a hook of Python's."""
    items = ",".join(["[0]"] * (size // 4))
    return ('{"name": "public__get_weather", "arguments": {"city": "Paris", "notes": [' + items + "]}}").encode()


async def timed(http: Any, body: bytes, headers: dict[str, str]) -> tuple[Any, float]:
    started = time.perf_counter()
    answer = await http.post("/execute", content=body, headers={"content-type": "application/json", **headers})
    return answer, time.perf_counter() - started


async def test_a_flood_of_long_bodies_is_refused_by_size_and_holds_no_other_caller(tmp_path: Path) -> None:
    async with opened_world(tmp_path, policy=LIMITS) as world:
        http, dev, admin = world["http"], bearer(world["dev"]), bearer(world["admin"])
        flood = list_heavy_call(1_900_000)
        one_line = json.dumps({"name": "public__get_weather", "arguments": {"city": "Paris"}}).encode()
        _, alone = await timed(http, one_line, admin)
        floods = [asyncio.create_task(timed(http, flood, dev)) for _ in range(FLOOD)]
        await asyncio.sleep(0.05)  # the flood is read and charged (or parsed) first
        answer, waited = await timed(http, one_line, admin)
        assert answer.status_code not in (429, 500), answer.text
        answers = [a for a, _ in await asyncio.gather(*floods)]
        refused = [a for a in answers if a.status_code == 429]
        # 29 tokens a body (1.9 MB in 64 KiB begun): the burst of 60 pays for two, the refill (10 a second) for
        # at most one more while the flood lasts. Before, each took one token: all twelve were parsed.
        assert len(refused) >= FLOOD - 3, [a.status_code for a in answers]
        # Refused for its size while the bucket held its request's token, then for that token (each refusal took
        # one: a body's key is charged before its size).
        by_size = [assert_problem(a, 429, "rate-limited") for a in refused]
        by_size = [problem for problem in by_size if "limit" in problem]
        assert by_size, [a.json()["detail"] for a in refused]
        for problem in by_size:
            assert (problem["limit"], problem["cost"]) == ("policy.body_kib_per_token", 29), problem
            assert f"{len(flood):,} bytes" in problem["detail"] and "64 KiB" in problem["detail"], problem
        assert all(int(rejected.headers["retry-after"]) >= 1 for rejected in refused)
        # The admin's call is neither refused nor held by the flood's charges (in process its parses held it
        # 70 ms before; the red team's 2.4 s was a live service's).
        assert waited < alone + 0.6, f"the admin's call took {waited:.2f} s in the flood, {alone:.3f} s alone"


async def test_a_body_without_content_length_is_charged_once_read_before_it_is_parsed(tmp_path: Path) -> None:
    async with opened_world(tmp_path, policy={"rate_limit_per_minute": 0.01, "rate_limit_burst": 60}) as world:
        http, dev = world["http"], bearer(world["dev"])
        flood = list_heavy_call(1_900_000)

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
            for start in range(0, len(flood), 256_000):
                yield flood[start : start + 256_000]

        statuses = []
        for _ in range(3):
            answer = await http.post("/execute", content=chunks(), headers={"content-type": "application/json", **dev})
            statuses.append(answer.status_code)
        # 29 tokens each (1.9 MB, 64 KiB a token): the bucket of 60 pays for two. Before, all three ran.
        assert 429 not in statuses[:2] and statuses[2] == 429, statuses
        problem = assert_problem(answer, 429, "rate-limited")
        assert problem["limit"] == "policy.body_kib_per_token", problem


async def test_a_batch_pays_for_its_body_and_calls_together_at_most_the_burst(tmp_path: Path) -> None:
    async with opened_world(tmp_path, policy={"rate_limit_per_minute": 0.01, "rate_limit_burst": 10}) as world:
        http, dev = world["http"], bearer(world["dev"])
        # 10 calls in a 200 KB body: 4 tokens for the body and 9 more calls were 13, more than a bucket holds.
        padding = {"notes": ["x" * 100] * 1900}
        calls = [{"name": f"none__tool_{i}", "arguments": padding if i == 0 else {}} for i in range(10)]
        body = json.dumps({"calls": calls}).encode()
        assert 3 * 65536 < len(body) <= 4 * 65536
        answer = await http.post("/execute/batch", content=body, headers={"content-type": "application/json", **dev})
        assert answer.status_code == 200 and answer.json()["failed"] == 10, answer.text
        await get_gateway(world["app"].state.resources).log.flush()
        assert await count_rows(world["app"], Execution) == 10
        # The bucket paid exactly its burst: nothing is left for the next request.
        assert_problem(await http.get("/tools", headers=dev), 429, "rate-limited")


async def test_ordinary_bodies_cost_one_token(tmp_path: Path) -> None:
    async with opened_world(tmp_path, policy={"rate_limit_per_minute": 0.01, "rate_limit_burst": 3}) as world:
        http, dev = world["http"], bearer(world["dev"])
        call = {"name": "public__get_weather", "arguments": {"city": "Paris", "notes": ["x" * 60] * 900}}  # 57 KB
        for _ in range(3):
            answer = await http.post("/execute", json=call, headers=dev)
            assert answer.status_code != 429, answer.text
        problem = assert_problem(await http.post("/execute", json=call, headers=dev), 429, "rate-limited")
        assert "limit" not in problem or problem["limit"] != "policy.body_kib_per_token", problem


async def test_a_body_sent_again_after_its_retry_after_is_paid_for(tmp_path: Path) -> None:
    """A refused body's request took its token first, and takes one again when sent again: the 429 told the time
    the rest of the cost would be there, so a client waiting exactly that long was refused again, every time."""
    async with opened_world(tmp_path, policy={"rate_limit_per_minute": 60, "rate_limit_burst": 3}) as world:
        http, dev = world["http"], bearer(world["dev"])
        body = list_heavy_call(100_000)  # 2 tokens of a burst of 3
        headers = {"content-type": "application/json", **dev}
        assert (await http.post("/execute", content=body, headers=headers)).status_code != 429
        problem = assert_problem(await http.post("/execute", content=body, headers=headers), 429, "rate-limited")
        assert problem["limit"] == "policy.body_kib_per_token" and problem["cost"] == 2, problem
        await asyncio.sleep(problem["retry_after"])
        again = await http.post("/execute", content=body, headers=headers)
        assert again.status_code != 429, again.text
