"""The execution log keeps the digest of a call's arguments, not their values, unless
`execution.log_raw_arguments` says otherwise: an invalid call's logged detail names where and how its arguments
failed the schema, never what they were (jsonschema's messages quote the value)."""

from __future__ import annotations

import contextlib
import gc
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from service.db.models import Execution
from service.execution.redaction import MAX_VALUES, _leaves, redact_arguments
from service.execution.runtime import get_gateway
from service.security.json_body import strict_json
from tests.security.conftest import assert_problem, make_settings, probe_entry, running, servers_file

SECRET = "hunter2-very-secret-password"


@pytest.mark.parametrize("raw", [False, True])
async def test_an_invalid_arguments_value_is_logged_only_with_raw_arguments(tmp_path: Path, raw: bool) -> None:
    execution = {
        "servers_file": servers_file(tmp_path, {"probe": probe_entry()}),
        "startup_wait_seconds": 60,
        "log_raw_arguments": raw,
    }
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        answer = await http.post("/execute", json={"name": "probe__echo", "arguments": {"text": 5, "times": SECRET}})
        problem = assert_problem(answer, 422, "invalid-arguments")
        assert SECRET in problem["detail"]  # the caller is told about its own value
        await get_gateway(app.state.resources).log.flush()
        async with app.state.resources.session() as session:
            row = (await session.execute(select(Execution.arguments, Execution.error_detail))).one()
    if raw:
        assert row.arguments == {"text": 5, "times": SECRET} and SECRET in row.error_detail
    else:
        assert row.arguments is None
        assert row.error_detail == (
            "Arguments do not match the input schema of probe__echo: /text: type; /times: type"
        ), row.error_detail


# A stdio server with one tool whose every call is a JSON-RPC error quoting the arguments it was given.
QUOTING = """
import json, sys
TOOL = {"name": "login", "description": "Log in.", "inputSchema": {"type": "object", "properties": {
    "user": {"type": "string"}, "password": {"type": "string"}, "pin": {"type": "integer"}}}}
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method, answer = message["method"], {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        answer["result"] = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                            "serverInfo": {"name": "quoting", "version": "1"}}
    elif method == "tools/list":
        answer["result"] = {"tools": [TOOL]}
    elif method == "tools/call":
        given = message["params"]["arguments"]
        text = f"login failed for {given['user']} with password '{given['password']}' (pin {given['pin']}): {given}"
        answer["error"] = {"code": -32602, "message": text}
    else:
        answer["result"] = {}
    sys.stdout.write(json.dumps(answer) + "\\n")
    sys.stdout.flush()
"""


@pytest.mark.parametrize("raw", [False, True])
async def test_an_upstream_error_quoting_arguments_is_logged_without_their_values(tmp_path: Path, raw: bool) -> None:
    script = tmp_path / "quoting.py"
    script.write_text(QUOTING)
    execution = {
        "servers_file": servers_file(tmp_path, {"quoting": {"command": sys.executable, "args": [str(script)]}}),
        "startup_wait_seconds": 60,
        "log_raw_arguments": raw,
    }
    arguments = {"user": "alice", "password": SECRET, "pin": 482913}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        answer = await http.post("/execute", json={"name": "quoting__login", "arguments": arguments})
        problem = assert_problem(answer, 502, "upstream-error")
        assert SECRET in problem["detail"]  # the admin caller reads the upstream's own words
        await get_gateway(app.state.resources).log.flush()
        async with app.state.resources.session() as session:
            logged = (await session.execute(select(Execution.error_detail))).scalar_one()
    if raw:
        assert SECRET in logged and "482913" in logged
    else:
        assert SECRET not in logged and "482913" not in logged and "alice" not in logged, logged
        assert "login failed for <argument /user> with password '<argument /password>' (pin <argument /pin>)" in logged


def test_the_redaction_walk_counts_arrays_and_objects_toward_its_bound() -> None:
    # 2 MB of empty arrays before the one string: the walk stops after MAX_VALUES values, arrays included
    # (counting strings and numbers only, it went through all of them).
    padded = {"a": [[] for _ in range(3 * MAX_VALUES)], "b": SECRET}
    assert list(_leaves(padded)) == []
    assert redact_arguments(f"bad {SECRET}", {"b": SECRET, **padded}, 200) == "bad <argument /b>"
    deep: Any = [SECRET]
    for _ in range(MAX_VALUES + 5):
        deep = [deep]
    assert list(_leaves({"d": deep})) == []  # no recursion either: 10,000 levels deep is no RecursionError


@pytest.mark.parametrize("body", [b'{"a": [1, 2, {"b": "c"}]}', b'{"a": NaN}'])
def test_a_parsed_body_leaves_the_garbage_collector_on(body: bytes) -> None:
    assert gc.isenabled()
    with contextlib.suppress(ValueError):
        strict_json(body)
    assert gc.isenabled()
