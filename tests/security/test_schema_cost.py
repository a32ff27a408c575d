"""Checking arguments against an input schema costs a bounded amount of CPU, off the event loop: a schema whose
size says nothing of its cost (references that fan out, a huge `enum` or `anyOf` times the arguments,
`uniqueItems` over many items) neither holds the event loop nor runs without end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import assert_problem, make_settings, running

# Each $defs entry evaluates the next one twice: 2**20 evaluations of `{}`, ~30 s of jsonschema (2 KB of schema).
FAN_OUT = {
    "type": "object",
    "$defs": {
        **{f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(20)},
        "d20": {"type": "object"},
    },
    "$ref": "#/$defs/d0",
}
# 18,000 values compared with each of 2,000 items: 36 million comparisons, ~17 s of jsonschema.
BIG_ENUM = {"type": "object", "properties": {"xs": {"type": "array", "items": {"enum": list(range(10_000, 28_000))}}}}
MAX_LAG_SECONDS = 0.3


def tool(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"server": "s", "name": name, "description": "d", "input_schema": schema}


@asynccontextmanager
async def loop_lag() -> AsyncIterator[list[float]]:
    """The longest the event loop took to wake a 5 ms sleeper while the block ran (one value, at the end)."""
    worst = [0.0]
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            worst[0] = max(worst[0], time.perf_counter() - started - 0.005)

    watcher = asyncio.create_task(watch())
    try:
        yield worst
    finally:
        done.set()
        await watcher


@pytest.mark.parametrize(
    ("schema", "arguments"),
    [(FAN_OUT, {}), (BIG_ENUM, {"xs": [27_999] * 2000})],
    ids=["ref-fan-out", "enum-times-items"],
)
async def test_a_costly_schema_is_refused_after_its_budget_without_holding_the_loop(
    tmp_path: Path, schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        assert (await http.post("/tools", json={"tools": [tool("costly", schema)]})).status_code == 200
        started = time.perf_counter()
        async with loop_lag() as lag:
            response = await http.post("/execute", json={"name": "s__costly", "arguments": arguments})
        assert time.perf_counter() - started < 10
        body = assert_problem(response, 422, "invalid-tool")
        assert body["errors"][0]["pointer"] == "/input_schema"
        assert "took more than 1 s of CPU (MAX_CHECK_CPU_SECONDS)" in body["errors"][0]["reason"]
        assert body["execution_id"]
        assert lag[0] < MAX_LAG_SECONDS, lag


async def test_unique_items_is_checked_in_linear_time_with_json_equality(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        schema = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
        assert (await http.post("/tools", json={"tools": [tool("unique", schema)]})).status_code == 200
        # Numbers mixed with strings do not sort: jsonschema compared every pair (20,000 items: ~30 s).
        distinct = [i if i % 2 else str(i) for i in range(20_000)]
        async with loop_lag() as lag:
            response = await http.post("/execute", json={"name": "s__unique", "arguments": {"xs": distinct}})
        assert_problem(response, 502, "upstream-error")  # valid: on to the (missing) server
        assert lag[0] < MAX_LAG_SECONDS, lag
        same = [[1, 1.0], [{"a": 1, "b": [2]}, {"b": [2], "a": 1}], [[1, "x"], [1.0, "x"]], [None, None]]
        different = [[1, True], [0, False], ["1", 1], [{"a": 1}, {"a": 1, "b": 1}], [[1, 2], [2, 1]], [None, 0]]
        for xs in same:
            body = assert_problem(
                await http.post("/execute", json={"name": "s__unique", "arguments": {"xs": xs}}),
                422,
                "invalid-arguments",
            )
            assert [(e["pointer"], e["keyword"]) for e in body["errors"]] == [("/xs", "uniqueItems")], xs
        for xs in different:
            response = await http.post("/execute", json={"name": "s__unique", "arguments": {"xs": xs}})
            assert_problem(response, 502, "upstream-error")
