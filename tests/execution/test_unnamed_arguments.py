"""A missing required argument beside one the schema does not name (`txt` for `text`) says so: the schema's
silence on other properties let the misspelt one through unsaid, and the caller heard only of the missing one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.execution.test_execute import running, stdio_entry

pytestmark = pytest.mark.upstream


async def test_a_missing_argument_names_the_unnamed_ones_given_beside_it(tmp_path: Path) -> None:
    async with running(tmp_path, {"t": stdio_entry("stdio")}) as (_app, client):
        misspelt = await client.post("/execute", json={"name": "t__echo", "arguments": {"txt": "hi", "times": 1}})
        missing = await client.post("/execute", json={"name": "t__echo", "arguments": {"times": 1}})
    assert misspelt.status_code == 422
    assert misspelt.json()["errors"] == [
        {
            "pointer": "/text",
            "reason": "'text' is a required property (given 'txt', which the schema does not name; its properties: "
            "text, times)",
            "keyword": "required",
        }
    ]
    assert missing.json()["errors"][0]["reason"] == "'text' is a required property"
