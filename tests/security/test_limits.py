"""Bad input: every limit refuses with a 413 or 422 problem that names it, and nothing is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx

from service.db.models import Search, Tool
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running, serving


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


async def test_a_body_over_the_limit_is_413_naming_it(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"max_body_bytes": 10_000})
    async with running(settings) as (app, http):
        tool = {"server": "big", "name": "x", "description": "y" * 20_000}
        body = assert_problem(await http.post("/tools", json={"tools": [tool]}), 413, "payload-too-large")
        assert "policy.max_body_bytes" in body["detail"] and body["max_bytes"] == 10_000

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"tools": [{"server": "big", "name": "x", "description": "'
            for _ in range(30):
                yield b"y" * 1000
            yield b'"}]}'

        streamed = await http.post("/tools", content=chunks(), headers={"Content-Type": "application/json"})
        assert_problem(streamed, 413)
        assert await count_rows(app, Tool) == 0


async def test_a_long_query_is_422_naming_the_limit(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, search={"max_query_chars": 100})
    async with running(settings) as (app, http):
        body = assert_problem(await http.post("/search", json={"query": "q" * 101}), 422)
        assert body["limit"] == "search.max_query_chars" and body["errors"][0]["pointer"] == "/body/query"
        assert await count_rows(app, Search) == 0


async def test_a_big_batch_is_422_naming_the_limit(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, execution={"batch_max_calls": 3})
    async with running(settings) as (_app, http):
        calls = {"calls": [{"name": "a__b"}] * 4}
        body = assert_problem(await http.post("/execute/batch", json=calls), 422)
        assert body["limit"] == "execution.batch_max_calls"


async def test_a_limit_of_one_is_said_in_the_singular(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, permissions=None, execution={"batch_max_calls": 1}, policy={"max_tools_per_registration": 1}
    )
    async with running(settings) as (_app, http):
        batch = assert_problem(await http.post("/execute/batch", json={"calls": [{"name": "a__b"}] * 2}), 422)
        tools = [{"server": "s", "name": f"t{i}"} for i in range(2)]
        registration = assert_problem(await http.post("/tools", json={"tools": tools}), 413)
    assert batch["detail"] == "A batch holds at most 1 call, not 2"
    assert batch["errors"] == [{"pointer": "/body/calls", "reason": "at most 1 call"}]
    assert registration["detail"].startswith("A registration holds at most 1 tool, not 2 ")
    assert registration["errors"] == [{"pointer": "/body/tools", "reason": "at most 1 tool"}]


async def test_too_many_tools_in_one_registration_is_413_naming_the_limit(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"max_tools_per_registration": 5})
    async with running(settings) as (app, http):
        tools = [{"server": "s", "name": f"t{i}", "description": "d"} for i in range(6)]
        body = assert_problem(await http.post("/tools", json={"tools": tools}), 413, "payload-too-large")
        assert body["limit"] == "policy.max_tools_per_registration"
        assert await count_rows(app, Tool) == 0


async def test_deep_big_and_wordy_tools_are_refused_one_by_one(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        tools = [
            {"server": "s", "name": "deep", "description": "d", "input_schema": nested(200)},
            {
                "server": "s",
                "name": "huge",
                "description": "d",
                "input_schema": {
                    "type": "object",
                    "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(2000)},
                },
            },
            {"server": "s", "name": "wordy", "description": "w" * 20_000},
        ]
        body = assert_problem(await http.post("/tools", json={"tools": tools}), 422, "invalid-tool")
        reasons = {e["tool"]: e["reason"] for e in body["errors"]}
        assert "MAX_SCHEMA_DEPTH" in reasons["deep"]
        assert "MAX_SCHEMA_BYTES" in reasons["huge"]
        assert "description is longer than" in reasons["wordy"]
        assert await count_rows(app, Tool) == 0


async def test_deeply_nested_arguments_are_a_4xx_problem(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        deep = "[" * 100_000 + "]" * 100_000
        response = await http.post(
            "/execute",
            content=f'{{"name": "a__b", "arguments": {{"x": {deep}}}}}',
            headers={"Content-Type": "application/json"},
        )
        assert 400 <= response.status_code < 500
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_an_analytics_window_without_a_utc_time_is_422(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None)
    async with running(settings) as (_app, http):
        answer = await http.get("/analytics/tools", params={"since": "0001-01-01T00:00:00+05:00"})
        body = assert_problem(answer, 422, "invalid-request")
        assert body["errors"][0]["pointer"] == "/query/since"


async def test_an_analytics_window_that_ends_before_it_starts_is_422(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None)
    async with running(settings) as (_app, http):
        backwards = {"since": "2026-12-05T00:00:00Z", "until": "2026-12-01T00:00:00Z"}
        answers = [await http.get(f"/analytics/{route}", params=backwards) for route in ("tools", "timeseries")]
        empty = await http.get("/analytics/callers", params={"since": "2026-12-01T00:00:00Z", "until": "2026-12-01"})
        before_default = await http.get("/analytics/conversion", params={"until": "2020-01-01T00:00:00Z"})
        fine = await http.get("/analytics/tools", params={"since": "2026-12-01T00:00:00Z", "until": "2026-12-02"})
    for answer in [*answers, empty, before_default]:
        body = assert_problem(answer, 422, "invalid-request")
        assert body["detail"].startswith("The window is empty: until (20"), body
        assert body["errors"][0]["pointer"] == "/query/until"
    assert assert_problem(answers[0], 422)["errors"][0]["reason"] == (
        "until (2026-12-01T00:00:00+00:00) is not after `since`"
    )
    assert "`since` (30 days ago, `days`, " in assert_problem(before_default, 422)["detail"]
    assert fine.status_code == 200 and fine.json() == {"tools": []}


async def test_one_key_holds_a_bounded_number_of_event_streams(tmp_path: Path) -> None:
    """Each /events stream stays open until its client leaves: one key could hold connections without end."""
    settings = make_settings(tmp_path, permissions=None, policy={"max_event_streams_per_key": 2})
    async with running(settings) as (app, http):
        first, second = await cli_key(app, "agent", []), await cli_key(app, "other", [])
        async with (
            serving(app) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            AsyncExitStack() as open_,
        ):
            for _ in range(2):
                stream = await open_.enter_async_context(client.stream("GET", "/events", headers=bearer(first)))
                assert stream.status_code == 200
            refused = await client.get("/events", headers=bearer(first))
            body = assert_problem(refused, 429, "rate-limited")
            assert body["limit"] == "policy.max_event_streams_per_key" and refused.headers["retry-after"]
            async with client.stream("GET", "/events", headers=bearer(second)) as other:
                assert other.status_code == 200  # another key has its own streams
        # Streams that ended give their places back.
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            with anyio.fail_after(10):
                while True:
                    async with client.stream("GET", "/events", headers=bearer(first)) as again:
                        if again.status_code == 200:
                            break
                    await anyio.sleep(0.1)


async def test_a_call_or_search_body_has_a_smaller_limit_than_a_registration(tmp_path: Path) -> None:
    """An 18 MB /execute body of empty objects held the event loop 1.7 s and 1.2 GB for 23 s; a batch of 1.5M
    calls 9.5 s and 1 GB before it was refused for its length. Only a registration needs megabytes."""
    settings = make_settings(tmp_path, permissions=None, policy={"max_call_body_bytes": 5_000})
    async with running(settings) as (app, http):
        filler = "y" * 20_000
        for path, payload in (
            ("/execute", {"name": "s__x", "arguments": {"z": filler}}),
            ("/execute/batch", {"calls": [{"name": "s__x", "arguments": {"z": filler}}]}),
            ("/search", {"query": "x", "tags": [filler]}),
            ("/run", {"script": filler}),
        ):
            body = assert_problem(await http.post(path, json=payload), 413, "payload-too-large")
            assert body["limit"] == "policy.max_call_body_bytes" and body["max_bytes"] == 5_000, path
            assert "policy.max_call_body_bytes" in body["detail"]
        tool = {"server": "big", "name": "x", "description": "y" * 8_000}
        registered = await http.post("/tools", json={"tools": [tool]})
        assert registered.status_code == 200, registered.text
        assert await count_rows(app, Search) == 0


async def test_a_search_filter_is_bounded_and_each_value_costs_once(tmp_path: Path) -> None:
    """`tags: ["code"] * 100_000` (an 800 KB /search body) held every search 8.6 s (2 MB, 250,000 values: 23.8 s)
    on 3,000 tagged tools: the index marked the tag's rows once per value, under the lock every search takes. Values
    are now taken once each, and past search.max_filter_values a filter is a 422 naming its pointer."""
    settings = make_settings(tmp_path, permissions=None, search={"max_filter_values": 10})
    async with running(settings) as (app, http):
        tools = [{"server": "s", "name": f"t{i}", "description": "read a file", "tags": ["code"]} for i in range(3)]
        assert (await http.post("/tools", json={"tools": tools})).status_code == 200
        retriever = app.state.resources.retriever
        seen: list[Any] = []
        original = retriever.search

        async def recording(query: str, k: int, where: Any, **kwargs: Any) -> Any:
            seen.append(where)
            return await original(query, k, where, **kwargs)

        retriever.search = recording
        repeated = await http.post("/search", json={"query": "read", "tags": ["code"] * 10, "servers": ["s"] * 10})
        assert repeated.status_code == 200, repeated.text
        assert len(repeated.json()["results"]) == 3
        assert seen[-1].tags == ("code",) and seen[-1].servers == ("s",)
        for field in ("tags", "servers"):
            values = [f"v{i}" for i in range(11)]
            body = assert_problem(await http.post("/search", json={"query": "read", field: values}), 422)
            assert body["limit"] == "search.max_filter_values" and body["errors"][0]["pointer"] == f"/body/{field}"
            assert "search.max_filter_values" in body["detail"]
        assert len(seen) == 1  # the refused ones never reached the index


async def test_analytics_take_the_window_in_days_as_the_command_line_does(tmp_path: Path) -> None:
    """`toolscout analytics tools --days 7` had no counterpart: `GET /analytics/tools?days=7` was a 422."""
    settings = make_settings(tmp_path, permissions=None)
    async with running(settings) as (_app, http):
        week = await http.get("/analytics/tools", params={"days": "7"})
        half = await http.get("/analytics/callers", params={"days": "0.5"})
        none = await http.get("/analytics/tools", params={"days": "0"})
        huge = await http.get("/analytics/tools", params={"days": "1e12"})
        before = await http.get("/analytics/conversion", params={"days": "2", "until": "2020-01-01T00:00:00Z"})
    assert (week.status_code, week.json()) == (200, {"tools": []})
    assert (half.status_code, half.json()) == (200, {"callers": []})
    for answer in (none, huge):
        assert assert_problem(answer, 422, "invalid-request")["errors"][0]["pointer"] == "/query/days"
    assert "`since` (2 days ago, `days`, " in assert_problem(before, 422)["detail"]
