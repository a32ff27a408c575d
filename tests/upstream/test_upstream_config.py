"""Servers files in the `mcpServers` format MCP clients use: stdio and streamable HTTP entries, VS Code's
`servers`, disabled entries, `${VAR}` expansion at start, redaction, errors that point at the bad field."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from service.errors import InvalidRequest
from service.settings import ExecutionSettings, Settings
from service.upstream.config import load_servers_file, parse_servers_document
from service.upstream.demo import create_demo_data, demo_servers
from service.upstream.registration import check_api_server
from service.upstream.service import configured_servers

CLAUDE_DESKTOP = {
    "mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=UTC"]},
        "Files & Docs": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
            "env": {"DEBUG": True, "LEVEL": 3},
            "cwd": "/tmp",
        },
        "remote": {
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer ${env:TOKEN}"},
            "timeout": 12.5,
        },
        "off": {"command": "never", "disabled": True},
    }
}


def test_claude_desktop_format() -> None:
    specs = {s.id: s for s in parse_servers_document(CLAUDE_DESKTOP)}
    assert set(specs) == {"time", "Files_Docs", "remote"}
    assert specs["time"].transport == "stdio" and specs["time"].args == (
        "mcp-server-time",
        "--local-timezone=UTC",
    )
    files = specs["Files_Docs"]
    assert files.env == {"DEBUG": "true", "LEVEL": "3"} and files.cwd == "/tmp"
    remote = specs["remote"]
    assert (remote.transport, remote.url, remote.timeout_seconds) == (
        "http",
        "https://mcp.example.com/mcp",
        12.5,
    )
    assert remote.public_config()["headers"] == {"Authorization": "***"}
    assert remote.config()["headers"] == {"Authorization": "Bearer ${env:TOKEN}"}  # stored unexpanded


def test_variables_are_expanded_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_servers_document(CLAUDE_DESKTOP)[2]
    monkeypatch.setenv("TOKEN", "s3cret")
    assert spec.expanded().headers == {"Authorization": "Bearer s3cret"}
    assert spec.headers == {"Authorization": "Bearer ${env:TOKEN}"}


async def test_a_variable_in_a_server_added_over_the_api_is_refused_at_its_field() -> None:
    spec = parse_servers_document(
        {"mcpServers": {"docs": {"url": "https://mcp.example.com/${HOST}/mcp",
                                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN}", "X/Y": "${env:A}${B}"}}}},
        source="api",
    )[0]
    with pytest.raises(InvalidRequest) as raised:
        await check_api_server(spec, ExecutionSettings(), where="/body/mcpServers/docs")
    assert raised.value.extensions["errors"] == [
        {"pointer": "/body/mcpServers/docs/url", "reason": "environment reference ${HOST}"},
        {"pointer": "/body/mcpServers/docs/headers/Authorization", "reason": "environment reference ${DOCS_TOKEN}"},
        {"pointer": "/body/mcpServers/docs/headers/X~1Y", "reason": "environment reference ${env:A}, ${B}"},
    ]
    references = "${B}, ${DOCS_TOKEN}, ${HOST}, ${env:A}"
    assert raised.value.detail.startswith(f"Servers added over the API may not use {references}:")


def test_vs_code_servers_key_and_types() -> None:
    specs = parse_servers_document(
        {
            "servers": {
                "a": {"type": "stdio", "command": "node", "args": ["a.js"]},
                "b": {"type": "http", "url": "http://127.0.0.1:9000/mcp"},
            }
        }
    )
    assert [(s.id, s.transport) for s in specs] == [("a", "stdio"), ("b", "http")]


@pytest.mark.parametrize(
    ("document", "pointer", "reason"),
    [
        ({"tools": []}, "", "`mcpServers` member"),
        ({"mcpServers": {"x": {"args": ["a"]}}}, "/mcpServers/x/command", "needs a command"),
        ({"mcpServers": {"x": {"url": "ftp://host"}}}, "/mcpServers/x/url", "http:// or https://"),
        ({"mcpServers": {"x": {"type": "sse", "url": "http://h/sse"}}}, "/mcpServers/x/type", "SSE"),
        (
            {"mcpServers": {"x": {"command": "a", "args": "not a list"}}},
            "/mcpServers/x/args",
            "list of strings",
        ),
        ({"mcpServers": {"x": {"command": "a", "timeout": -1}}}, "/mcpServers/x/timeout", "positive"),
        (
            {"mcpServers": {"a b": {"command": "a"}, "a_b": {"command": "b"}}},
            "/mcpServers/a_b",
            "the id 'a_b'",
        ),
        ({"mcpServers": {"a/b~c": {"url": "ftp://host"}}}, "/mcpServers/a~1b~0c/url", "http:// or https://"),
        ({"servers": {"x": {"command": "a", "egress_proxy": 1}}}, "/servers/x/egress_proxy", "true or false"),
        ({"mcpServers": {"x": {"url": "http://h/mcp", "headers": ["a"]}}}, "/mcpServers/x/headers", "string values"),
        ({"mcpServers": {"x": {"command": "a", "env": {"A": "\x00"}}}}, "/mcpServers/x/env/A", "NUL"),
    ],
)
def test_errors_point_at_the_field(document: dict[str, object], pointer: str, reason: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_servers_document(document)
    assert caught.value.extensions["errors"][0]["pointer"] == pointer
    assert reason in caught.value.detail


def test_a_field_no_server_has_is_named_in_the_log_from_a_file(caplog: pytest.LogCaptureFixture) -> None:
    """A client may add fields of its own to the file (it stays readable), but `argz` started the server without
    its arguments and nothing said so."""
    with caplog.at_level(logging.WARNING, "service.upstream.config"):
        specs = parse_servers_document({"mcpServers": {"t": {"command": "py", "argz": ["-m", "x"], "envFile": "a"}}})
    assert specs[0].args == ()
    assert caplog.messages == ["servers file: /mcpServers/t: ignored argz, envFile: not a field of a server"]


def test_files_json_and_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "servers.json"
    as_json.write_text(json.dumps(CLAUDE_DESKTOP))
    as_yaml = tmp_path / "servers.yaml"
    as_yaml.write_text("mcpServers:\n  time:\n    command: python\n    args: [-m, mcp_server_time]\n")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert len(load_servers_file(as_json)) == 3
    assert load_servers_file(as_yaml)[0].args == ("-m", "mcp_server_time")
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        load_servers_file(broken)
    broken_yaml = tmp_path / "broken.yaml"
    broken_yaml.write_text("mcpServers:\n  time: {command: python\n")
    with pytest.raises(InvalidRequest) as caught:  # one line: PyYAML's own message quotes the file over several
        load_servers_file(broken_yaml)
    assert caught.value.detail == (
        f"servers file {broken_yaml} is not valid YAML: expected ',' or '}}', but got '<stream end>' (line 3, column 1)"
    )
    with pytest.raises(InvalidRequest, match="cannot read"):
        load_servers_file(tmp_path / "missing.json")
    yaml_named_otherwise = tmp_path / "servers.txt"  # read as JSON; it was "not valid YAML" in the JSON parser's words
    yaml_named_otherwise.write_text("mcpServers:\n  time: {command: python}\n")
    with pytest.raises(InvalidRequest) as caught:
        load_servers_file(yaml_named_otherwise)
    assert caught.value.detail.startswith(f"servers file {yaml_named_otherwise} is not valid JSON: ")
    assert caught.value.detail.endswith(" (a file named .yaml or .yml is read as YAML)")
    upper = tmp_path / "SERVERS.YML"
    upper.write_text("mcpServers:\n  time: {command: python}\n")
    assert load_servers_file(upper)[0].command == "python"


def test_a_servers_file_replaces_the_demo(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"only": {"command": "x"}}}))
    with_file = Settings(data_dir=tmp_path, execution=ExecutionSettings(servers_file=path))
    without = Settings(data_dir=tmp_path, execution=ExecutionSettings(demo_servers=False))
    assert [s.id for s in configured_servers(with_file)] == ["only"]
    assert configured_servers(without) == []
    demo = {s.id for s in demo_servers(Settings(data_dir=tmp_path))}
    assert {"time", "fetch", "git"} <= demo


def test_demo_data_is_a_folder_and_a_git_repository(tmp_path: Path) -> None:
    create_demo_data(tmp_path)
    create_demo_data(tmp_path)  # idempotent
    assert (tmp_path / "files" / "cities.csv").read_text().startswith("city,country,timezone")
    assert (tmp_path / "repo" / ".git").is_dir() and (tmp_path / "repo" / "hello.py").exists()
