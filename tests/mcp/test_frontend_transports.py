"""Real transports: `toolscout mcp` over stdio, the streamable-HTTP app in both protocol eras, and upstream
`tools/list_changed` travelling upstream server -> API (re-sync, GET /events) -> front end -> clients."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi import FastAPI
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ToolsListChanged

from service.mcp.profiles import Profile
from service.mcp.serve import http_app
from service.mcp.server import Frontend, create_frontend
from service.settings import Settings
from tests.mcp.conftest import (
    Recorder,
    catalog_tools,
    frontend_of,
    serving,
    text_of,
    toolscout_command,
)
from tests.processes import free_port

META = ["status", "search_tools", "call_tool", "fetch_result", "run_script"]


@pytest.fixture
def frontend_settings(settings: Settings, live_api: tuple[str, FastAPI]) -> Settings:
    front = settings.model_copy(deep=True)
    front.frontend.api_url = live_api[0]
    front.frontend.events_retry_seconds = 0.2
    return front


def stdio_params(api_url: str, cwd: Path, *args: str) -> StdioServerParameters:
    command = toolscout_command()
    return StdioServerParameters(
        command=command[0],
        args=[*command[1:], "mcp", "--api-url", api_url, *args],
        cwd=str(cwd),
        env={"TOOLSCOUT_FRONTEND__EVENTS_RETRY_SECONDS": "0.2"},
    )


async def wait_for_events(frontend: Frontend) -> None:
    """Until the front end follows GET /events (changes published before that are not seen)."""
    with anyio.fail_after(10):
        while not frontend.events_connected:  # noqa: ASYNC110 - a flag of the front end, polled by the test
            await anyio.sleep(0.02)


async def test_stdio_front_end_lists_searches_activates_and_calls(
    live_api: tuple[str, FastAPI], tmp_path: Path
) -> None:
    url, app = live_api
    recorder = Recorder()
    async with Client(
        stdio_params(url, tmp_path, "--mode", "dynamic"), mode="legacy", message_handler=recorder
    ) as client:
        assert client.server_info is not None and client.server_info.name == "toolscout"
        assert [t.name for t in (await client.list_tools()).tools] == META
        found = json.loads(text_of(await client.call_tool("search_tools", {"query": "probe__echo", "k": 2})))
        await recorder.wait_changed()
        listed = [t.name for t in (await client.list_tools()).tools]
        assert listed == META + [t["name"] for t in found["tools"]] and "probe__echo" in listed
        assert text_of(await client.call_tool("probe__echo", {"text": "over stdio"})) == "over stdio"
        # A catalog change reaches the stdio client too (POST /tools publishes tools_changed).
        new = {"server": "notes", "name": "add_note", "description": "Add a note"}
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.post("/tools", json={"tools": [new]})).status_code == 200
        await recorder.wait_changed()


async def test_stdio_front_end_reports_a_bad_profile_and_exits(
    live_api: tuple[str, FastAPI], tmp_path: Path
) -> None:
    command = toolscout_command()
    result = await anyio.run_process(
        [*command, "mcp", "--api-url", live_api[0], "--profile", "nope"], cwd=tmp_path, check=False
    )
    assert result.returncode == 2
    assert b"No profile named 'nope'" in result.stderr


async def test_http_front_end_serves_both_protocol_eras(frontend_settings: Settings) -> None:
    # http_app runs the front end in its own lifespan, as `toolscout mcp --transport http` does.
    frontend = create_frontend(frontend_settings, mode="dynamic", transport="http")
    port = free_port()
    async with serving(http_app(frontend), port) as base:
        await wait_for_events(frontend)
        legacy_events = Recorder()
        async with (
            Client(f"{base}/mcp", mode="legacy", message_handler=legacy_events) as legacy,
            Client(f"{base}/mcp", mode="auto") as modern,
        ):
            assert legacy.protocol_version == "2025-11-25" and modern.protocol_version == "2026-07-28"
            assert [t.name for t in (await legacy.list_tools()).tools] == META
            await legacy.call_tool("search_tools", {"query": "probe__echo", "k": 1})
            await legacy_events.wait_changed()
            assert [t.name for t in (await legacy.list_tools()).tools] == META + ["probe__echo"]
            # The 2026 client is another session: its list did not change.
            assert [t.name for t in (await modern.list_tools()).tools] == META
            async with modern.listen(tools_list_changed=True) as subscription:
                await modern.call_tool("search_tools", {"query": "probe__pid", "k": 1})
                with anyio.fail_after(10):
                    assert await subscription.__anext__() == ToolsListChanged()
            assert [t.name for t in (await modern.list_tools(cache_mode="bypass")).tools] == META + [
                "probe__pid"
            ]
            assert text_of(await modern.call_tool("probe__echo", {"text": "modern"})) == "modern"
            assert text_of(await legacy.call_tool("probe__echo", {"text": "legacy"})) == "legacy"


async def test_upstream_list_changed_reaches_clients_and_full_mode_relists(
    frontend_settings: Settings,
) -> None:
    frontend = create_frontend(frontend_settings, mode="full", transport="http")
    async with serving(http_app(frontend), free_port()) as base:
        await wait_for_events(frontend)
        legacy_events = Recorder()
        async with (
            Client(f"{base}/mcp", mode="legacy", message_handler=legacy_events) as legacy,
            Client(f"{base}/mcp", mode="auto") as modern,
        ):
            before = {t.name for t in (await legacy.list_tools()).tools}
            assert "probe__added_later" not in before and len(before) == 85 + 7 + 1  # and run_script
            async with modern.listen(tools_list_changed=True) as subscription:
                # The upstream server adds a tool and sends notifications/tools/list_changed; the API
                # re-syncs and publishes tools_changed on GET /events; the front end drops its cache and
                # tells everyone.
                added = await legacy.call_tool("probe__add_tool", {"name": "added_later"})
                assert text_of(added) == "added added_later"
                await legacy_events.wait_changed()
                with anyio.fail_after(10):
                    assert await subscription.__anext__() == ToolsListChanged()
            after = {t.name for t in (await legacy.list_tools()).tools}
            assert after == before | {"probe__added_later"}
            assert text_of(await legacy.call_tool("probe__added_later", {"value": "v"})) == "added_later: v"


async def test_dynamic_activations_follow_upstream_changes(
    frontend_settings: Settings, live_api: tuple[str, FastAPI]
) -> None:
    url, app = live_api
    async with frontend_of(frontend_settings, None, "dynamic", transport="memory") as frontend:
        await wait_for_events(frontend)
        recorder = Recorder()
        async with Client(frontend.server, mode="legacy", message_handler=recorder) as client:
            await client.call_tool("search_tools", {"query": "git__git_status", "k": 1})
            await recorder.wait_changed()
            assert [t.name for t in (await client.list_tools()).tools][-1] == "git__git_status"
            changed = {
                **next(t for t in catalog_tools() if t["name"] == "git_status"),
                "server": "git",
                "description": "Shows the working tree status (changed upstream)",
            }
            async with httpx.AsyncClient(base_url=url) as http:
                assert (await http.post("/tools", json={"tools": [changed]})).status_code == 200
            await recorder.wait_changed()
            status = next(t for t in (await client.list_tools()).tools if t.name == "git__git_status")
            assert status.description == "Shows the working tree status (changed upstream)"


async def test_catalog_registrations_and_deletions_reach_full_mode_clients(
    frontend_settings: Settings, live_api: tuple[str, FastAPI]
) -> None:
    url, _ = live_api
    async with frontend_of(frontend_settings, None, "full", transport="memory") as frontend:
        await wait_for_events(frontend)
        recorder = Recorder()
        async with (
            Client(frontend.server, mode="legacy", message_handler=recorder) as client,
            httpx.AsyncClient(base_url=url) as http,
        ):
            assert len((await client.list_tools()).tools) == 85 + 7 + 1  # and run_script
            new = {
                "server": "notes",
                "name": "add_note",
                "description": "Add a note",
                "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            }
            assert (await http.post("/tools", json={"tools": [new]})).status_code == 200
            await recorder.wait_changed()
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert len(listed) == 85 + 7 + 2 and listed["notes__add_note"].description == "Add a note"
            assert (await http.delete("/tools/notes__add_note")).status_code == 204
            await recorder.wait_changed()
            assert "notes__add_note" not in {t.name for t in (await client.list_tools()).tools}
            assert (await http.delete("/servers/time")).status_code == 200
            await recorder.wait_changed()
            assert len((await client.list_tools()).tools) == 85 + 7 + 1 - 2


@pytest.mark.parametrize("mode", ["full", "dynamic"])
async def test_a_change_outside_the_profile_reaches_no_client_of_it(
    frontend_settings: Settings, live_api: tuple[str, FastAPI], mode: str
) -> None:
    # A notification alone tells the client that something changed in a part of the catalog it must not know of.
    url, _ = live_api
    profile = Profile(name="coding", servers=("git",), always_listed=("time__get_current_time",))
    async with frontend_of(frontend_settings, None, mode, profile=profile) as frontend:  # type: ignore[arg-type]
        await wait_for_events(frontend)
        recorder = Recorder()
        async with (
            Client(frontend.server, mode="legacy", message_handler=recorder) as client,
            httpx.AsyncClient(base_url=url) as http,
        ):
            before = [t.name for t in (await client.list_tools()).tools]
            outside = {"server": "notes", "name": "add_note", "description": "Add a note"}
            assert (await http.post("/tools", json={"tools": [outside]})).status_code == 200
            inside = {"server": "git", "name": "git_blame", "description": "Who changed each line"}
            assert (await http.post("/tools", json={"tools": [inside]})).status_code == 200
            await recorder.wait_changed()
            await anyio.sleep(1)  # time for a second notification, had the change outside made one
            assert recorder.list_changed == 1
            after = [t.name for t in (await client.list_tools()).tools]
            assert set(after) == (set(before) | {"git__git_blame"} if mode == "full" else set(before))
            # The always-listed tool's server is not in the profile, but a change there concerns its clients.
            assert (await http.delete("/tools/time__get_current_time")).status_code == 204
            await recorder.wait_changed()
            await anyio.sleep(1)
            assert recorder.list_changed == 2
