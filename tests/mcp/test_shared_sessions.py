"""Dynamic-mode sessions in Redis: two front-end instances (behind one balancer) serve one client's session."""

from __future__ import annotations

import json
import uuid

import httpx
import mcp.types as types

from service.mcp.profiles import Profile
from service.settings import Settings
from tests.mcp.conftest import client_of, frontend_of, text_of

META = ["status", "search_tools", "call_tool", "fetch_result", "run_script"]
REDIS_URL = "redis://127.0.0.1:6379/0"
NO_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1
ALICE = types.Implementation(name="alice", version="1")


def shared(settings: Settings, url: str = REDIS_URL) -> Settings:
    """These settings with front-end sessions in Redis, under a key prefix of this test alone."""
    settings.frontend.redis_url = url
    settings.cluster.key_prefix = f"toolscout-test-{uuid.uuid4().hex[:8]}"
    settings.cluster.redis_timeout_seconds = 0.2
    return settings


async def test_two_front_ends_share_a_sessions_activations(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    settings = shared(settings)
    async with (
        frontend_of(settings, api_transport, "dynamic") as first,
        frontend_of(settings, api_transport, "dynamic") as second,
        client_of(first, "auto", client_info=ALICE) as (on_first, _),
        client_of(second, "auto", client_info=ALICE) as (on_second, _),
    ):
        assert on_first.protocol_version == "2026-07-28"  # stateless era: any instance may get any request
        found = json.loads(text_of(await on_first.call_tool("search_tools", {"query": "git commit changes", "k": 3})))
        names = [t["name"] for t in found["tools"]]
        # The same client on the other instance sees what its search on the first one activated ...
        listed = [t.name for t in (await on_second.list_tools(cache_mode="bypass")).tools]
        assert listed == META + names
        # ... and a search there adds to the same set, seen back on the first instance.
        more = json.loads(text_of(await on_second.call_tool("search_tools", {"query": "current time", "k": 1})))
        listed = [t.name for t in (await on_first.list_tools(cache_mode="bypass")).tools]
        assert listed == META + names + [more["tools"][0]["name"]]
        key = next(s.key for s in first.sessions.states() if s.active)
        copy = second.sessions.peek(key)
        assert copy is not None and copy.search_ids == first.sessions.states()[0].search_ids
        # Another client is another session, on either instance.
        async with client_of(second, "auto", client_info=types.Implementation(name="bob", version="1")) as (bob, _):
            assert [t.name for t in (await bob.list_tools(cache_mode="bypass")).tools] == META


async def test_front_ends_keep_their_own_sessions_while_redis_is_down(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    settings = shared(settings, NO_REDIS)
    async with (
        frontend_of(settings, api_transport, "dynamic") as frontend,
        client_of(frontend, "auto", client_info=ALICE) as (client, _),
    ):
        found = json.loads(text_of(await client.call_tool("search_tools", {"query": "read a file", "k": 2})))
        listed = [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]
        assert listed == META + [t["name"] for t in found["tools"]]
        assert frontend.sessions.shared is not None and frontend.sessions.shared.healthy is False


async def test_a_malformed_shared_state_is_read_as_far_as_it_is_well_formed(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    """A state in Redis of another shape (another version of the front end, or anyone who can write to Redis)
    neither breaks the client's tools/list and calls nor lists an entry whose name is not its tool's."""
    settings = shared(settings)
    async with (
        frontend_of(settings, api_transport, "dynamic") as frontend,
        client_of(frontend, "auto", client_info=ALICE) as (client, _),
    ):
        found = json.loads(text_of(await client.call_tool("search_tools", {"query": "read a file", "k": 1})))
        name = found["tools"][0]["name"]
        shared_store = frontend.sessions.shared
        assert shared_store is not None
        (key,) = await shared_store.redis.keys(f"{settings.cluster.key_prefix}:mcp-session:*")
        good = json.loads(await shared_store.redis.get(key))["active"][0]
        state = {
            "active": [
                1,
                ["alone"],
                ["x", "not a tool"],
                ["other__tool", {**good[1]}],
                ["bad", {"name": "bad", "annotations": "x"}],
                good,
            ],
            "search_ids": [["a", "b", "c"], 7, [name, "s-1"]],
        }
        await shared_store.redis.set(key, json.dumps(state))
        listed = [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]
        assert listed == [*META, name]
        copy = next(s for s in frontend.sessions.states() if s.active)
        assert (list(copy.active), dict(copy.search_ids)) == ([name], {name: "s-1"})
        await shared_store.redis.set(key, json.dumps({"active": 5, "search_ids": {"x": 1}}))
        assert [t.name for t in (await client.list_tools(cache_mode="bypass")).tools] == META
        called = await client.call_tool("status", {})
        assert called.is_error is False
        # Nested past the parser's depth: RecursionError, not ValueError, failed the client's tools/list.
        await shared_store.redis.set(key, '{"active": ' + "[" * 100_000)
        assert [t.name for t in (await client.list_tools(cache_mode="bypass")).tools] == META


async def test_a_shared_state_lists_only_tools_of_the_front_ends_profile(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    """The profile bounds what a session lists, whatever Redis holds for it: a tool of another server written into
    the state is not listed by a front end whose profile is one server."""
    settings = shared(settings)
    profile = Profile(name="time-only", servers=("time",))
    async with (
        frontend_of(settings, api_transport, "dynamic", profile=profile) as frontend,
        client_of(frontend, "auto", client_info=ALICE) as (client, _),
    ):
        found = json.loads(text_of(await client.call_tool("search_tools", {"query": "current time", "k": 1})))
        name = found["tools"][0]["name"]
        assert name.startswith("time__")
        shared_store = frontend.sessions.shared
        assert shared_store is not None
        (key,) = await shared_store.redis.keys(f"{settings.cluster.key_prefix}:mcp-session:*")
        state = json.loads(await shared_store.redis.get(key))
        outside = {**state["active"][0][1], "name": "git__git_commit", "server": "git"}
        state["active"].insert(0, ["git__git_commit", outside])
        await shared_store.redis.set(key, json.dumps(state))
        listed = [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]
        assert listed == [*META[:-1], name]
