"""A search's `servers` or `tags` that no tool the caller may use has: the answer was 200 with no result and not a
word, for a misspelt server (`tiem`) as for one written in another case (`Time`). Now `warnings` names the value
and the nearest the caller has, and never a server or tag of tools the caller may not use."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from policy_world import bearer

from tests.mcp.conftest import client_of, frontend_of, text_of

NO_SERVER = "no tool this key may use has server"
CASES = [  # caller, servers, tags, warnings (pointer, reason)
    ("dev", ["publc"], None, [("/body/servers/0", f"{NO_SERVER} 'publc'; did you mean public?")]),
    ("dev", ["Util", "public"], None, [("/body/servers/0", f"{NO_SERVER} 'Util'; did you mean util?")]),
    # vault and payroll hold tools dev may not use: neither is named, nor told apart from a server that does not exist.
    ("dev", ["vault"], None, [("/body/servers/0", f"{NO_SERVER} 'vault'")]),
    ("dev", ["payrol"], None, [("/body/servers/0", f"{NO_SERVER} 'payrol'")]),
    ("dev", ["nowhere"], None, [("/body/servers/0", f"{NO_SERVER} 'nowhere'")]),
    ("approver", ["payrol"], None, [("/body/servers/0", f"{NO_SERVER} 'payrol'; did you mean payroll?")]),
    ("dev", None, ["outdor"], [("/body/tags/0", "no tool this key may use has tag 'outdor'")]),
    ("dev", ["public", "util"], None, []),
]


@pytest.mark.parametrize(("who", "servers", "tags", "warnings"), CASES)
async def test_a_filter_value_no_usable_tool_has_is_a_warning_naming_the_nearest_usable_one(
    world: dict[str, Any], who: str, servers: list[str] | None, tags: list[str] | None, warnings: list[tuple[str, str]]
) -> None:
    body = {"query": "weather", "servers": servers, "tags": tags}
    response = await world["http"].post("/search", json=body, headers=bearer(world[who]))
    assert response.status_code == 200
    said = [(w["pointer"], w["reason"]) for w in response.json().get("warnings", [])]
    assert said == warnings
    if not warnings:
        assert "warnings" not in response.json()


async def test_the_mcp_front_ends_search_says_which_server_it_meant(world: dict[str, Any]) -> None:
    """search_tools with `server: "publc"` said "No tool matched; rephrase the task or check status for servers"."""
    settings = world["resources"].settings
    settings.frontend.api_key = world["dev"]
    transport = httpx.ASGITransport(world["app"])
    async with frontend_of(settings, transport) as frontend, client_of(frontend) as (client, _):
        missed = await client.call_tool("search_tools", {"query": "weather", "server": "publc"})
        unknown = await client.call_tool("search_tools", {"query": "weather", "server": "vault"})
    assert text_of(missed) == (
        '{"tools":[],"hint":"No tool matched: no tool this key may use has server \'publc\'; did you mean public? '
        '(status lists the servers)."}'
    )
    assert text_of(unknown) == (
        '{"tools":[],"hint":"No tool matched: no tool this key may use has server \'vault\' (status lists the '
        'servers)."}'
    )
