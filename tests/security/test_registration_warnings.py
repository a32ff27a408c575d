"""POST /tools names the keys of a tool that no tool has: at most 20 of a batch, the others counted, each with an
exact pointer (the empty key and keys holding `~` or `/` included) and control characters escaped as JSON does."""

from __future__ import annotations

import json
from typing import Any

from tests.security.conftest import bearer


async def test_stray_keys_are_named_twenty_at_most(world: dict[str, Any]) -> None:
    http, admin = world["http"], world["admin"]
    stray = {f"k{i}": 0 for i in range(10_000)}
    tools = [
        {"server": "s", "name": "first", "description": "d", **stray},
        {"server": "s", "name": "second", "description": "d", "x": 1},
    ]
    response = await http.post("/tools", json={"tools": tools}, headers=bearer(admin))
    assert response.status_code == 200, response.text
    body = response.json()
    assert [w["pointer"] for w in body["warnings"]] == [f"/body/tools/0/k{i}" for i in range(20)]
    assert body["more_warnings"] == 10_000 - 20 + 1
    assert len(response.content) < 10_000
    assert body["tools"] == ["s__first", "s__second"]


async def test_odd_keys_get_exact_pointers(world: dict[str, Any]) -> None:
    http, admin = world["http"], world["admin"]
    tool = {"server": "s", "name": "odd", "description": "d", "": 1, "a/b": 2, "~1": 3, "bell\x07\n": 4}
    response = await http.post("/tools", json={"tools": [tool]}, headers=bearer(admin))
    assert response.status_code == 200, response.text
    body = response.json()
    assert [(w["field"], w["pointer"]) for w in body["warnings"]] == [
        ("", "/body/tools/0/"),
        ("a/b", "/body/tools/0/a~1b"),
        ("~1", "/body/tools/0/~01"),
        ("bell\x07\n", "/body/tools/0/bell\x07\n"),
    ]
    assert "more_warnings" not in body
    assert "\\u0007\\n" in response.text  # escaped in the JSON text, never a raw control character
    assert json.loads(response.text) == body
