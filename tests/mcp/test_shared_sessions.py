"""Dynamic-mode sessions in Redis: two front-end instances (behind one balancer) serve one client's session."""

from __future__ import annotations

import json
import uuid

import httpx
import mcp.types as types

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
