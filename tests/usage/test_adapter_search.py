"""The query adapter in the search (real model, real index): a caller's repeated phrasings lift the tool they led
to for a new phrasing, in its own view only (not another caller's of its scope, not another scope's), and a tool
without history with the best text match stays first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.policy.callers import Caller
from service.resources import Resources
from service.search.service import search_tools
from service.usage.adapter_training import refresh_maps
from tests.usage.test_usage_signal import _use, learning_resources

TOOLS = [
    {"server": "chat", "name": "send_message", "description": "Send a chat message to a colleague"},
    {"server": "net", "name": "ping_host", "description": "Ping a network host to check that it is reachable"},
    {"server": "net", "name": "traceroute", "description": "Trace the network route to a host"},
    {"server": "net", "name": "check_port", "description": "Check whether a port is open on a host"},
    {"server": "net", "name": "dns_lookup", "description": "Look up the DNS records of a domain"},
    {"server": "mail", "name": "send_email", "description": "Send an email to an address"},
    {"server": "calendar", "name": "create_event", "description": "Create an event in the calendar"},
    {"server": "notes", "name": "remember_fact", "description": "Store a fact in the knowledge graph"},
    {"server": "notes", "name": "list_facts", "description": "List every stored fact"},
    {"server": "clock", "name": "current_time", "description": "The current time in a time zone"},
    {"server": "weather", "name": "forecast", "description": "The weather forecast for a city"},
    {"server": "files", "name": "erase_folder", "description": "Erase a folder and everything inside it"},
    {"server": "files", "name": "list_files", "description": "List the files in a folder"},
]
DEV = Caller("dev-1", frozenset({"dev"}))
DEV_2 = Caller("dev-2", frozenset({"dev"}))
OPS = Caller("ops-1", frozenset({"ops"}))
PEOPLE = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan")
TOPICS = ("the budget", "the release", "lunch", "the outage")
QUERY = "ping Zoe about the offsite"  # a new phrasing of the team's jargon: "ping someone" is to message them


@pytest.fixture
async def resources(tmp_path: Path) -> AsyncIterator[Resources]:
    # adapter_retrain_growth 0: every refresh trains again, the last one sees every use.
    async with learning_resources(tmp_path, TOOLS, adapter_retrain_growth=0.0) as resources:
        yield resources


def _signals(outcome: object) -> dict[str, dict[str, float]]:
    return {r.name: r.explain["signals"] for r in outcome.results}  # type: ignore[attr-defined]


@pytest.mark.model
async def test_a_callers_phrasings_lift_the_tool_they_led_to_in_its_own_view_only(resources: Resources) -> None:
    for person in PEOPLE:
        for topic in TOPICS:
            await _use(resources, DEV, f"ping {person} about {topic}", "chat__send_message", 1)
    for host in ("db-1", "the gateway", "10.0.0.7", "the build server"):
        await _use(resources, DEV, f"ping {host} to see if it is up", "net__ping_host", 1)
    assert resources.usage is not None
    resources.settings.learning.query_adapter_enabled = False
    _, without = await search_tools(resources, DEV, QUERY, k=5, explain=True)
    resources.settings.learning.query_adapter_enabled = True
    await refresh_maps(resources, resources.usage, wait=True)
    maps = resources.usage.maps["dev"]
    assert set(maps.own) == {"dev-1"} and maps.report["dev-1"].examples == 32 + 4  # 32 kept a tool
    assert set(maps.names) == {"chat__send_message", "net__ping_host"}  # the tools with history only
    _, adapted = await search_tools(resources, DEV, QUERY, k=5, explain=True)
    lifted = _signals(adapted)["chat__send_message"]["adapter"]
    assert 0.0 < lifted <= resources.settings.learning.adapter_weight
    assert _signals(adapted).get("net__ping_host", {}).get("adapter", 0.0) < lifted
    assert all("adapter" not in s for s in _signals(without).values())
    before = {r.name: r.score for r in without.results}
    after = {r.name: r.score for r in adapted.results}
    assert after["chat__send_message"] == pytest.approx(before["chat__send_message"] + lifted, abs=1e-3)
    assert [r.name for r in adapted.results].index("chat__send_message") <= [r.name for r in without.results].index(
        "chat__send_message"
    )
    # No other view moves: another caller of the scope and another scope read no map.
    for caller in (DEV_2, OPS):
        _, other = await search_tools(resources, caller, QUERY, k=5, explain=True)
        assert all("adapter" not in s for s in _signals(other).values())
    # A tool without history with the best text match stays first, and is never moved.
    _, clock = await search_tools(resources, DEV, "what is the current time in Tokyo", k=5, explain=True)
    assert clock.results[0].name == "clock__current_time"
    assert "adapter" not in _signals(clock)["clock__current_time"]
