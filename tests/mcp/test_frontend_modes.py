"""The four modes through an in-memory MCP client, over the real REST app with the 85 real tools."""

from __future__ import annotations

import json

import httpx
import mcp.types as types

from service.benchmarks.tokens import list_tokens
from service.mcp import MODES, render
from service.settings import Settings
from tests.mcp.conftest import catalog_tools, client_of, frontend_of, register, text_of

META = ["status", "search_tools", "call_tool", "fetch_result", "run_script"]
SERVERS = ["everything", "fetch", "filesystem", "git", "github", "memory", "slack", "time"]


async def test_lazy_lists_four_meta_tools_under_1000_tokens_whatever_the_catalog(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with frontend_of(settings, api_transport, "lazy") as frontend, client_of(frontend) as (client, _):
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == META
        assert render.count_tokens(render.wire_list(listed)) <= 1000
        await register(
            api_transport,
            [
                {"server": f"bulk{i % 40}", "name": f"tool_{i}", "description": f"Tool {i}"}
                for i in range(400)
            ],
        )
        assert (await client.list_tools()).tools == listed
        assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed


async def test_search_tools_returns_callable_names_descriptions_and_schemas(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with frontend_of(settings, api_transport) as frontend, client_of(frontend) as (client, _):
        result = await client.call_tool(
            "search_tools", {"query": "create an issue in a GitHub repository", "k": 3}
        )
        assert not result.is_error
        body = json.loads(text_of(result))
        assert len(body["tools"]) == 3
        assert "github__create_issue" in [t["name"] for t in body["tools"]]
        issue = next(t for t in body["tools"] if t["name"] == "github__create_issue")
        assert issue["description"] == "Create a new issue in a GitHub repository"
        assert set(issue["input_schema"]["required"]) == {"owner", "repo", "title"}
        assert "$schema" not in issue["input_schema"]
        assert "call_tool" in body["hint"]

        scoped = json.loads(
            text_of(await client.call_tool("search_tools", {"query": "read a file", "server": "git"}))
        )
        assert scoped["tools"] and {t["name"].split("__")[0] for t in scoped["tools"]} == {"git"}


async def test_grouped_adds_one_help_tool_per_server_that_searches_only_it(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with (
        frontend_of(settings, api_transport, "grouped") as frontend,
        client_of(frontend) as (client, _),
    ):
        listed = [t.name for t in (await client.list_tools()).tools]
        assert listed == META + [f"help_{s}" for s in SERVERS]
        help_git = next(t for t in (await client.list_tools()).tools if t.name == "help_git")
        assert "git server (12:" in str(help_git.description)
        body = json.loads(text_of(await client.call_tool("help_git", {"query": "show the commit history"})))
        assert body["tools"] and all(t["name"].startswith("git__") for t in body["tools"])


async def test_full_lists_every_tool_with_its_schema(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with frontend_of(settings, api_transport, "full") as frontend, client_of(frontend) as (client, _):
        listed = (await client.list_tools()).tools
        assert len(listed) == 85 + 1 and listed[-1].name == "run_script"  # the catalog, then code mode
        by_name = {t.name: t for t in listed}
        commit = by_name["git__git_commit"]
        assert commit.input_schema["required"] == ["repo_path", "message"]
        assert by_name["time__get_current_time"].annotations == types.ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )
        # The meta-tools are not listed but still answer.
        found = await client.call_tool("search_tools", {"query": "current time in a timezone", "k": 1})
        assert json.loads(text_of(found))["tools"][0]["name"].startswith("time__")


async def test_token_bench_counts_what_the_server_sends(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    catalog = [
        {
            "name": t["name"],
            "server": t["server"],
            "tool": t["tool"],
            "description": t["description"],
            "input_schema": t["input_schema"],
            "annotations": t["annotations"],
            "tags": t["tags"],
        }
        for t in (await _rest_catalog(api_transport))
    ]
    for mode in MODES:
        async with frontend_of(settings, api_transport, mode) as frontend, client_of(frontend) as (client, _):
            listed = (await client.list_tools()).tools
            assert list_tokens(mode, catalog) == (
                len(listed),
                render.count_tokens(render.wire_list(listed)),
            ), mode


async def _rest_catalog(transport: httpx.AsyncBaseTransport) -> list[dict[str, object]]:
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        return list((await http.get("/tools", params={"limit": 1000})).json()["tools"])


async def test_meta_tool_argument_errors_are_tool_results(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    async with frontend_of(settings, api_transport) as frontend, client_of(frontend) as (client, _):
        missing = await client.call_tool("search_tools", {})
        assert missing.is_error and "`query` is required" in text_of(missing)
        misspelt = await client.call_tool("search_tools", {"qery": "time", "k": 2})
        said = (
            "Arguments do not match the tool's input schema: `qery` is not an argument of search_tools (its "
            "arguments: query, k, server; did you mean query?)"
        )
        assert text_of(misspelt) == said
        only_k = await client.call_tool("search_tools", {"k": 2})
        assert text_of(only_k) == "Arguments do not match the tool's input schema: `query` is required (given: 'k')"
        blank = await client.call_tool("search_tools", {"query": " \t"})
        assert text_of(blank) == "Arguments do not match the tool's input schema: `query` must not be blank"
        bad_k = await client.call_tool("search_tools", {"query": "x", "k": 500})
        assert bad_k.is_error and "`k` must be an integer 1..50" in text_of(bad_k)
        bad_args = await client.call_tool("call_tool", {"name": "git__git_status", "arguments": "nope"})
        assert text_of(bad_args) == (
            "Arguments do not match the tool's input schema: `arguments` must be an object (a string was given, "
            "and it is not the JSON text of one)"
        )
        listed = await client.call_tool("call_tool", {"name": "git__git_status", "arguments": "[1]"})
        assert text_of(listed) == "Arguments do not match the tool's input schema: `arguments` must be an object"
        # The session survives every error.
        assert [t.name for t in (await client.list_tools()).tools] == META


async def test_a_meta_tools_argument_under_another_name_is_named_not_dropped(
    settings: Settings, api_transport: httpx.ASGITransport
) -> None:
    """Anthropic's tool_use block holds `input`: `call_tool {"name", "input"}` ran the tool with no arguments, and the
    answer spoke only of the tool's own missing field; `arguments` sent as its JSON text, as models often do, was
    refused though it holds an object (FastMCP reads it)."""
    async with frontend_of(settings, api_transport, "grouped") as frontend, client_of(frontend) as (client, _):
        prefix = "Arguments do not match the tool's input schema: "
        said = {
            ("call_tool", '{"name": "time__get_current_time", "input": {"timezone": "UTC"}}'): (
                "`input` is not an argument of call_tool (its arguments: name, arguments, approval_id; did you mean "
                "arguments?)"
            ),
            ("call_tool", '{"tool": "time__get_current_time", "arguments": {}}'): (
                "`tool` is not an argument of call_tool (its arguments: name, arguments, approval_id; did you mean "
                "name?)"
            ),
            ("search_tools", '{"query": "time", "limit": 2, "servers": "time"}'): (
                "`limit` is not an argument of search_tools (its arguments: query, k, server; did you mean k?); "
                "`servers` is not an argument of search_tools (its arguments: query, k, server; did you mean "
                "server?)"
            ),
            ("fetch_result", '{"id": "abc"}'): (
                "`id` is not an argument of fetch_result (its arguments: result_id, offset)"
            ),
            ("run_script", '{"code": "return 1"}'): (
                "`code` is not an argument of run_script (its arguments: script, approval_ids, timeout_seconds)"
            ),
            ("help_git", '{"q": "log"}'): "`q` is not an argument of help_git (its arguments: query; did you mean "
            "query?)",
        }
        for (tool, arguments), message in said.items():
            result = await client.call_tool(tool, json.loads(arguments))
            assert (result.is_error, text_of(result)) == (True, prefix + message), tool
        as_text = await client.call_tool("call_tool", {"name": "git__git_status", "arguments": '{"repo_path": 5}'})
        as_object = await client.call_tool("call_tool", {"name": "git__git_status", "arguments": {"repo_path": 5}})
        assert text_of(as_text) == text_of(as_object) == (
            "Arguments do not match the input schema of git__git_status: /repo_path: 5 is not of type 'string'"
        )
        # status takes no argument and ignores what it is given; a catalog tool's arguments are its schema's.
        assert not (await client.call_tool("status", {"verbose": True})).is_error
        assert [t.name for t in (await client.list_tools()).tools][:5] == META


async def test_an_unreachable_api_is_an_error_result_not_a_crash(settings: Settings) -> None:
    settings.frontend.api_url = "http://127.0.0.1:9"
    settings.frontend.events_retry_seconds = 30
    async with frontend_of(settings, None) as frontend, client_of(frontend) as (client, _):
        result = await client.call_tool("search_tools", {"query": "anything"})
        assert result.is_error
        assert "Toolscout API unavailable: The Toolscout API at http://127.0.0.1:9 is unreachable" in text_of(
            result
        )
        assert [t.name for t in (await client.list_tools()).tools] == META
        assert (await client.call_tool("status", {})).is_error


def test_catalog_fixture_is_the_85_real_tools() -> None:
    assert len(catalog_tools()) == 85
