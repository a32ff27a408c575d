"""The execution log keeps the digest of a call's arguments, not their values, unless
`execution.log_raw_arguments` says otherwise: an invalid call's logged detail names where and how its arguments
failed the schema, never what they were (jsonschema's messages quote the value)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from service.db.models import Execution
from service.execution.runtime import get_gateway
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
