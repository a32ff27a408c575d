"""The closest names of an unknown tool's 404 (POST /execute, GET /tools/{name}) are names actually close to
the one asked for, of tools the caller may use: a typo, the same name spelt another way or without its server,
the same words. A name close to nothing gets no suggestion (difflib's ratio named every tool of `util` for
`util__nope`), and a name close only to tools the caller may not use gets none either."""

from __future__ import annotations

from typing import Any

import pytest
from policy_world import bearer

CASES = [  # caller, name asked for, closest
    ("dev", "util__nope", []),
    ("dev", "nope__x", []),
    ("dev", "public__get_time", []),  # one word of two in common: not close
    ("dev", "public__get_wether", ["public__get_weather"]),
    ("dev", "get_weather", ["public__get_weather"]),
    ("dev", "Public.Get-Weather", ["public__get_weather"]),
    ("dev", "util__date_format", ["util__format_date"]),
    ("dev", "util__purge", ["util__purge_cache"]),
    ("dev", "vault__get_secrets", []),  # close to vault__get_secret, which dev may not use
    ("approver", "vault__get_secrets", ["vault__get_secret"]),
]


@pytest.mark.parametrize(("who", "name", "closest"), CASES)
async def test_only_close_names_of_usable_tools_are_suggested(
    world: dict[str, Any], who: str, name: str, closest: list[str]
) -> None:
    http, key = world["http"], world[who]
    executed = await http.post("/execute", json={"name": name}, headers=bearer(key))
    looked_up = await http.get(f"/tools/{name}", headers=bearer(key))
    for response in (executed, looked_up):
        assert response.status_code == 404
        assert response.json()["closest"] == closest
        hint = f"; closest: {', '.join(closest)}" if closest else ""
        assert response.json()["detail"] == f"No tool named {name!r}{hint}"


async def test_a_hidden_tool_and_a_missing_one_get_the_same_suggestions(world: dict[str, Any]) -> None:
    http, dev = world["http"], world["dev"]
    hidden = (await http.post("/execute", json={"name": "vault__get_secret"}, headers=bearer(dev))).json()
    missing = (await http.post("/execute", json={"name": "vault__get_secreq"}, headers=bearer(dev))).json()
    assert hidden["closest"] == missing["closest"] == []
