"""A script that fills its heap is told so (memory_limit) wherever it runs out. When QuickJS cannot even make
its "out of memory" error it throws null, and after an await that exception leaves the job instead of rejecting
the script: the run read as a script that threw null, or one awaiting a promise that never settles."""

from __future__ import annotations

import httpx
import pytest

from service.settings import Settings

FILL = "let a = []; for (let i = 0; i < 1e6; i++) a = [a];"  # about 40 MiB of nested arrays


@pytest.mark.parametrize(
    "script",
    [f"{FILL} return 1", f"await search_tools('weather');\n{FILL} return 1"],
    ids=["before any await", "after an await"],
)
async def test_a_script_that_fills_its_heap_is_a_memory_limit(
    client: httpx.AsyncClient, settings: Settings, script: str
) -> None:
    settings.code_mode.memory_mib = 32
    ran = (await client.post("/run", json={"script": script})).json()
    assert ran["error"]["type"] == "memory_limit", ran["error"]
    assert "32 MiB, code_mode.memory_mib" in ran["error"]["message"]


@pytest.mark.parametrize(
    ("script", "message"),
    [("throw null", "null"), ("await new Promise(() => {})", "the script awaits a promise that never settles")],
)
async def test_a_small_script_throwing_null_or_waiting_forever_is_still_its_own_error(
    client: httpx.AsyncClient, settings: Settings, script: str, message: str
) -> None:
    settings.code_mode.memory_mib = 32
    error = (await client.post("/run", json={"script": script})).json()["error"]
    assert (error["type"], error["message"]) == ("script_error", message)
