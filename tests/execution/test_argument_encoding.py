"""A valid call's arguments are serialised for their digest and their token count in the argument check's worker
thread, never on the event loop (1.5 MB held the loop 12 ms, `bench/valid_argument_loop.py`), and only once they
are found valid: invalid ones are not counted."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from service.errors import InvalidArguments
from service.execution.results import count_tokens
from service.execution.runtime import get_gateway
from service.policy.callers import OPEN_CALLER
from tests.execution.test_execute import executions, running, stdio_entry

pytestmark = pytest.mark.upstream

BIG = " ".join(f"word{i}" for i in range(60_000))  # ~470 KB of text


def spy_on_encoding(monkeypatch: pytest.MonkeyPatch, at_least: int) -> list[bool]:
    """For each JSON text of `at_least` characters or more made with the json module: whether on this thread."""
    loop_thread = threading.get_ident()
    encode = json.JSONEncoder.encode
    seen: list[bool] = []

    def spied(self: json.JSONEncoder, value: Any) -> str:
        text = encode(self, value)
        if len(text) >= at_least:
            seen.append(threading.get_ident() == loop_thread)
        return text

    monkeypatch.setattr(json.JSONEncoder, "encode", spied)
    return seen


async def test_a_valid_calls_arguments_are_encoded_off_the_event_loop_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arguments = {"text": BIG, "times": 0}  # echoes "": the result is small, only the arguments are big
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, _client):
        executor = get_gateway(app.state.resources).executor
        on_loop = spy_on_encoding(monkeypatch, len(BIG))
        result = await executor.execute(OPEN_CALLER, "t__echo", arguments)
        monkeypatch.undo()
        rows = await executions(app)
    assert result.status == "ok" and result.content == [{"type": "text", "text": ""}]
    assert on_loop == [False, False]  # the digest's canonical JSON, then the compact JSON whose tokens are counted
    expected = count_tokens(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))
    assert expected > 60_000
    assert [(r.status, r.input_tokens) for r in rows] == [("ok", expected)]


async def test_invalid_arguments_are_not_encoded_for_counting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (app, _client):
        executor = get_gateway(app.state.resources).executor
        on_loop = spy_on_encoding(monkeypatch, len(BIG))
        with pytest.raises(InvalidArguments) as refused:
            await executor.execute(OPEN_CALLER, "t__echo", {"text": BIG, "times": "twice"})
        monkeypatch.undo()
        rows = await executions(app)
    assert refused.value.extensions["errors"] == [
        {"pointer": "/times", "reason": "'twice' is not of type 'integer'", "keyword": "type"}
    ]
    assert on_loop == [False]  # the digest only
    assert [(r.status, r.input_tokens) for r in rows] == [("invalid_arguments", 0)]
