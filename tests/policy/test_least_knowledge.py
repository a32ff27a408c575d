"""Least knowledge, attacked through the surfaces the other policy tests leave out: a caller with a restricted key
never learns that a tool it may not use exists (MCP sessions shared in Redis, approvals, readiness, learning)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import mcp.types as types
from mcp import Client
from policy_world import FORBIDDEN_FOR_DEV, make_settings

from service.mcp.server import create_frontend

REDIS_URL = "redis://127.0.0.1:6379/0"


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_dynamic_sessions_in_redis_are_not_shared_across_api_keys(world: dict[str, Any], tmp_path: Any) -> None:
    """Two front ends on one Redis, one with the admin's key and one with a restricted key: the same client name
    (no HTTP key, no session id) must not see on the restricted one what a search activated on the other."""
    prefix = f"toolscout-test-{uuid.uuid4().hex[:8]}"

    def frontend(key: str) -> Any:
        settings = make_settings(tmp_path, permissions=None)
        settings.frontend.api_key = key
        settings.frontend.redis_url = REDIS_URL
        settings.cluster.key_prefix = prefix
        transport = httpx.ASGITransport(app=world["app"])
        return create_frontend(settings, mode="dynamic", transport="http", api_transport=transport)

    admin_front, dev_front = frontend(world["admin"]), frontend(world["dev"])
    client = types.Implementation(name="agent", version="1")
    async with (
        admin_front.running(),
        dev_front.running(),
        Client(admin_front.server, mode="auto", client_info=client) as on_admin,
        Client(dev_front.server, mode="auto", client_info=client) as on_dev,
    ):
        assert admin_front.sessions.shared is not None
        found = json.loads(
            text_of(await on_admin.call_tool("search_tools", {"query": "read a secret from the vault", "k": 3}))
        )
        assert {t["name"] for t in found["tools"]} & FORBIDDEN_FOR_DEV  # the admin activated forbidden tools
        listed = await on_dev.list_tools(cache_mode="bypass")
        names = {t.name for t in listed.tools}
        assert not names & FORBIDDEN_FOR_DEV, names & FORBIDDEN_FOR_DEV
        assert "vault" not in json.dumps([t.model_dump(mode="json") for t in listed.tools])
        status = json.loads(text_of(await on_dev.call_tool("status", {})))
        assert status["active_tools"] == []
        # The admin's own session is untouched: the same client name still sees its activations there.
        again = {t.name for t in (await on_admin.list_tools(cache_mode="bypass")).tools}
        assert {t["name"] for t in found["tools"]} <= again
