"""Dynamic mode: per-session activation, list_changed to both protocol eras, bounds and idle expiry."""

from __future__ import annotations

import json

import anyio
import httpx
import mcp.types as types
from mcp.client.subscriptions import ToolsListChanged

from service.mcp.sessions import SessionStore
from service.settings import Settings
from tests.mcp.conftest import client_of, frontend_of, text_of

META = ["status", "search_tools", "call_tool", "fetch_result", "run_script"]


async def test_a_search_activates_its_results_in_that_session_only(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with (
        frontend_of(settings, api_transport, "dynamic") as frontend,
        client_of(frontend) as (alice, alice_events),
        client_of(frontend) as (bob, bob_events),
    ):
        assert [t.name for t in (await alice.list_tools()).tools] == META
        found = json.loads(
            text_of(await alice.call_tool("search_tools", {"query": "git commit changes", "k": 3}))
        )
        names = [t["name"] for t in found["tools"]]
        assert "now in your tool list" in found["hint"]
        await alice_events.wait_changed()
        listed = (await alice.list_tools()).tools
        assert [t.name for t in listed] == META + names
        activated = next(t for t in listed if t.name == names[0])
        assert activated.input_schema["type"] == "object" and activated.description
        # Bob's session is untouched and heard nothing.
        assert [t.name for t in (await bob.list_tools()).tools] == META
        assert bob_events.list_changed == 0
        # The same search again changes nothing, so nothing is sent.
        await alice.call_tool("search_tools", {"query": "git commit changes", "k": 3})
        await anyio.sleep(0.05)
        assert alice_events.list_changed == 1


async def test_activated_and_hidden_tools_are_called_by_exact_name(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with (
        frontend_of(settings, api_transport, "dynamic") as frontend,
        client_of(frontend) as (client, _),
    ):
        # Not listed and never searched: still routed to /execute under its exact name (the API answers, here
        # with its own problem since no upstream server runs this tool).
        result = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
        assert result.is_error and text_of(result)


async def test_activation_sets_are_bounded_per_session(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    settings.frontend.dynamic_max_active = 3
    async with (
        frontend_of(settings, api_transport, "dynamic") as frontend,
        client_of(frontend) as (client, events),
    ):
        first = json.loads(text_of(await client.call_tool("search_tools", {"query": "read a file", "k": 5})))
        assert len(first["tools"]) == 5
        await events.wait_changed()
        listed = [t.name for t in (await client.list_tools()).tools]
        assert listed == META + [t["name"] for t in first["tools"]][-3:]
        second = json.loads(
            text_of(await client.call_tool("search_tools", {"query": "slack message", "k": 1}))
        )
        listed = [t.name for t in (await client.list_tools()).tools]
        assert len(listed) == len(META) + 3 and listed[-1] == second["tools"][0]["name"]


async def test_idle_sessions_are_forgotten_and_return_to_the_meta_tools(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    now = [0.0]
    async with (
        frontend_of(settings, api_transport, "dynamic") as frontend,
        client_of(frontend) as (client, events),
    ):
        frontend.sessions = SessionStore(10, 8, idle_seconds=60, clock=lambda: now[0])
        await client.call_tool("search_tools", {"query": "current time", "k": 2})
        await events.wait_changed()
        assert len((await client.list_tools()).tools) == len(META) + 2
        now[0] += 30
        assert len((await client.list_tools()).tools) == len(META) + 2  # a list keeps the session alive
        now[0] += 61
        assert [t.name for t in (await client.list_tools()).tools] == META
        assert len(frontend.sessions) == 1  # the listing opened a new, empty session


async def test_a_closed_connection_drops_its_session(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with frontend_of(settings, api_transport, "dynamic") as frontend:
        async with client_of(frontend) as (client, events):
            await client.call_tool("search_tools", {"query": "fetch a url", "k": 1})
            await events.wait_changed()
            assert len(frontend.sessions) == 1 and frontend.notifier.connections == 1
        assert len(frontend.sessions) == 0 and frontend.notifier.connections == 0


async def test_2026_clients_hear_their_own_activations_on_listen_streams(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with (
        frontend_of(settings, api_transport, "dynamic") as frontend,
        client_of(frontend, "auto", client_info=types.Implementation(name="alice", version="1")) as (
            alice,
            _,
        ),
        client_of(frontend, "auto", client_info=types.Implementation(name="bob", version="1")) as (bob, _),
    ):
        assert alice.protocol_version == "2026-07-28"
        assert alice.server_capabilities.tools is not None and alice.server_capabilities.tools.list_changed
        async with (
            alice.listen(tools_list_changed=True) as alice_sub,
            bob.listen(tools_list_changed=True) as bob_sub,
        ):
            found = json.loads(
                text_of(await alice.call_tool("search_tools", {"query": "create a directory", "k": 2}))
            )
            with anyio.fail_after(5):
                assert await alice_sub.__anext__() == ToolsListChanged()
            listed = [t.name for t in (await alice.list_tools(cache_mode="bypass")).tools]
            assert listed == META + [t["name"] for t in found["tools"]]
            assert [t.name for t in (await bob.list_tools(cache_mode="bypass")).tools] == META
            with anyio.move_on_after(0.2) as quiet:
                await bob_sub.__anext__()
            assert quiet.cancelled_caught
        # A session named in _meta is ignored (issue 9): the activation lands in bob's own set.
        named = {"dev.toolscout/session": "project-x"}
        before = len(frontend.sessions)
        await bob.call_tool("search_tools", {"query": "memory graph entities", "k": 1}, meta=named)
        assert frontend.sessions.peek("client:project-x") is None
        assert len(frontend.sessions) == before


def test_session_store_bounds_sessions_and_active_tools() -> None:
    now = [0.0]
    store = SessionStore(max_sessions=2, max_active=2, idle_seconds=10, clock=lambda: now[0])
    a = store.get("a")
    assert store.activate(a, [{"name": "s__x"}, {"name": "s__y"}, {"name": "s__z"}])
    assert list(a.active) == ["s__y", "s__z"]
    assert not store.activate(a, [{"name": "s__z"}])
    assert store.activate(a, [{"name": "s__z", "description": "changed"}])
    store.get("b")
    store.get("c")  # evicts the least recently seen, a
    assert store.peek("a") is None and store.peek("b") is not None
    now[0] = 11
    assert store.states() == []
    store.remember_search(store.get("d"), ["s__x"], "search-1")
    assert store.get("d").search_ids == {"s__x": "search-1"}
