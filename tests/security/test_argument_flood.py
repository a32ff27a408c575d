"""One caller flooding POST /execute with huge, invalid, deeply nested arguments does not hold up the others: the
admin's call of a real upstream server and its searches still answer within a generous bound (before: 3.0 s
median, 6.8 s p90, over HTTP, bench/argument_flood.py), and each of the flood's answers lists at most 20 errors,
with their pointers, and says there were more. Answers carrying results, keys or caller data are not stored by
caches."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from tests.security.conftest import assert_problem, bearer, cli_key, make_settings, probe_entry, running, servers_file

PERMISSIONS = """
roles:
  dev:
    allow: ["server:flood", "server:probe"]
"""
# Every row breaks the schema three times (id and both tags): 15,000 rows are 45,000 errors in ~1.5 MB.
FLOOD_TOOL = {
    "server": "flood",
    "name": "ingest",
    "description": "Ingest rows of records",
    "input_schema": {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "integer"}}},
                },
            },
            "tree": {"type": "array"},
        },
    },
}
FLOODERS = 8
ADMIN_CALLS = 6
# Generous: a quiet call takes ~10 ms; a single admin call waited 6 s behind such a flood before.
MAX_ADMIN_SECONDS = 2.5


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def flood_body(depth: int) -> bytes:
    rows = [{"id": f"row-{i:06d}", "tags": ["alpha", "beta"], "note": "x" * 40} for i in range(15_000)]
    return json.dumps({"name": "flood__ingest", "arguments": {"rows": rows, "tree": nested(depth)}}).encode()


async def flood(http: httpx.AsyncClient, key: str, body: bytes, stop: asyncio.Event, answers: list[Any]) -> None:
    headers = bearer(key) | {"Content-Type": "application/json"}
    while not stop.is_set():
        answers.append(await http.post("/execute", content=body, headers=headers))


async def test_a_flood_of_invalid_arguments_does_not_hold_up_an_admins_call(tmp_path: Path) -> None:
    execution = {"servers_file": servers_file(tmp_path, {"probe": probe_entry()}), "startup_wait_seconds": 60}
    policy = {"rate_limit_per_minute": 0.0}
    settings = make_settings(tmp_path, permissions=PERMISSIONS, execution=execution, policy=policy)
    async with running(settings) as (app, http):
        admin, dev = await cli_key(app, "root", ["admin"]), await cli_key(app, "dev-agent", ["dev"])
        assert (await http.post("/tools", json={"tools": [FLOOD_TOOL]}, headers=bearer(admin))).status_code == 200
        call = {"name": "probe__echo", "arguments": {"text": "still here"}}
        assert (await http.post("/execute", json=call, headers=bearer(admin))).status_code == 200
        shallow, deep = flood_body(99), flood_body(150)
        assert len(shallow) > 1_400_000

        stop, answers = asyncio.Event(), []
        bodies = [shallow, deep] * (FLOODERS // 2)
        flooders = [asyncio.create_task(flood(http, dev, body, stop, answers)) for body in bodies]
        took: list[float] = []
        try:
            with anyio.fail_after(60):  # measured once the flood runs at its pace, not while it starts
                while len(answers) < FLOODERS:  # noqa: ASYNC110 - answers are counted, not signalled
                    await asyncio.sleep(0.05)
            for _ in range(ADMIN_CALLS):
                started = time.perf_counter()
                answer = await http.post("/execute", json=call, headers=bearer(admin))
                found = await http.post("/search", json={"query": "echo a text"}, headers=bearer(admin))
                took.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
                assert answer.json()["content"] == [{"type": "text", "text": "still here"}]
                assert found.status_code == 200 and "probe__echo" in [r["name"] for r in found.json()["results"]]
        finally:
            stop.set()
            await asyncio.gather(*flooders)

    assert max(took) < MAX_ADMIN_SECONDS, took
    assert len(answers) >= 2 * FLOODERS  # the flood ran all along
    listed = [assert_problem(answer, 422, "invalid-arguments") for answer in answers]
    too_many = [problem for problem in listed if problem["errors"][0]["keyword"] != "depth"]
    too_deep = [problem for problem in listed if problem["errors"][0]["keyword"] == "depth"]
    assert too_many and too_deep
    for problem in too_many:
        assert len(problem["errors"]) == 20 and problem["more_errors"] is True
        assert all(error["pointer"].startswith("/rows/") for error in problem["errors"]), problem["errors"]
        assert problem["errors"][0] == {
            "pointer": "/rows/0/id",
            "reason": "'row-000000' is not of type 'integer'",
            "keyword": "type",
        }
        assert "(the first 20 errors; there are more)" in problem["detail"]
    for problem in too_deep:
        assert problem["errors"] == [
            {"pointer": "", "reason": "nested more than 100 arrays or objects deep", "keyword": "depth"}
        ]
        assert "more_errors" not in problem


async def test_a_few_invalid_arguments_are_all_listed_without_more_errors(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        assert (await http.post("/tools", json={"tools": [FLOOD_TOOL]})).status_code == 200
        rows = [{"id": "a"}, {"id": 2, "tags": [1, "b"]}]
        answer = await http.post("/execute", json={"name": "flood__ingest", "arguments": {"rows": rows}})
    problem = assert_problem(answer, 422, "invalid-arguments")
    assert [error["pointer"] for error in problem["errors"]] == ["/rows/0/id", "/rows/1/tags/1"]
    assert "more_errors" not in problem and "there are more" not in problem["detail"]


async def test_answers_carrying_results_keys_or_caller_data_are_not_stored(tmp_path: Path) -> None:
    execution = {"servers_file": servers_file(tmp_path, {"probe": probe_entry()}), "startup_wait_seconds": 60}
    async with running(make_settings(tmp_path, execution=execution)) as (app, http):
        admin = bearer(await cli_key(app, "root", ["admin"]))
        big = await http.post("/execute", json={"name": "probe__big", "arguments": {"lines": 3000}}, headers=admin)
        result_id = big.json()["result_id"]
        answers = {
            "search": await http.post("/search", json={"query": "echo a text"}, headers=admin),
            "execute": await http.post(
                "/execute", json={"name": "probe__echo", "arguments": {"text": "hi"}}, headers=admin
            ),
            "execute problem": await http.post(
                "/execute", json={"name": "probe__echo", "arguments": {"text": 5}}, headers=admin
            ),
            "results": await http.get(f"/results/{result_id}", headers=admin),
            "keys": await http.post("/keys", json={"caller": "someone", "roles": []}, headers=admin),
            "key list": await http.get("/keys", headers=admin),
            "tools": await http.get("/tools", headers=admin),
            "tool": await http.get("/tools/probe__echo", headers=admin),
            "no key": await http.get("/tools"),
        }
        console = await http.get("/console")
    assert big.status_code == 200 and big.json()["truncated"] is True
    for what, answer in answers.items():
        assert answer.status_code in (200, 201, 401, 422), (what, answer.text)
        assert answer.headers["cache-control"] == "no-store", what
        assert answer.headers["x-content-type-options"] == "nosniff", what
    assert answers["keys"].json()["key"]  # a key's secret, the answer most worth keeping out of caches
    assert answers["execute problem"].status_code == 422 and answers["no key"].status_code == 401
    assert console.headers["cache-control"] == "no-cache"  # a route's own header is kept
