"""`toolscout servers remove NAME`: the undoing of `toolscout index` (a server and its tools out of the catalog and
the index), on the local data folder and through a running service. It had none but a `DELETE /servers/...` by hand.
An unknown name is told the closest servers, as an unknown tool is told the closest tools."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from service.cli import main
from tests.search.test_cli_search import direct_cli
from tests.security.conftest import cli_key, make_settings, running, serving

TOOLS = [
    {"name": "get_weather", "description": "Current weather for a city", "input_schema": {"type": "object"}},
    {"name": "send_email", "description": "Send an email to a recipient", "input_schema": {"type": "object"}},
]


def _searched(capsys: pytest.CaptureFixture[str], query: str) -> list[str]:
    assert main(["search", query, "--json"]) == 0
    return [result["name"] for result in json.loads(capsys.readouterr().out)["results"]]


def test_a_server_indexed_from_a_file_is_removed_on_the_local_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    direct_cli(tmp_path, monkeypatch)
    (tmp_path / "mine.json").write_text(json.dumps({"tools": TOOLS}))
    (tmp_path / "kept.jsonl").write_text(json.dumps({"server": "kept", **TOOLS[0]}) + "\n")
    assert main(["index", str(tmp_path / "mine.json")]) == 0 and main(["index", str(tmp_path / "kept.jsonl")]) == 0
    capsys.readouterr()
    assert set(_searched(capsys, "weather in Paris")) == {"mine__get_weather", "mine__send_email", "kept__get_weather"}
    assert main(["servers", "remove", "mine"]) == 0
    assert capsys.readouterr().out == "removed mine and its 2 tools\n"
    assert _searched(capsys, "weather in Paris") == ["kept__get_weather"]
    assert main(["servers", "remove", "mine"]) == 1
    assert capsys.readouterr().err == "error: No server named 'mine'\n"
    assert main(["servers", "remove", "kep"]) == 1  # a misspelt name is told the servers it may have meant
    assert capsys.readouterr().err == "error: No server named 'kep'; closest: kept\n"


async def test_a_server_is_removed_through_the_running_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        headers = {"Authorization": f"Bearer {admin}"}
        assert (await http.post("/tools", json={"tools": TOOLS, "server": "mine"}, headers=headers)).status_code == 200
        async with serving(app) as url:
            monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", url)
            monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_KEY", admin)
            capsys.readouterr()
            assert await anyio.to_thread.run_sync(main, ["servers", "remove", "mien"]) == 1
            assert capsys.readouterr().err == "error: No server named 'mien'; closest: mine\n"
            assert await anyio.to_thread.run_sync(main, ["servers", "remove", "mine", "--json"]) == 0
            removed = json.loads(capsys.readouterr().out)
        assert removed["id"] == "mine" and sorted(removed["removed_tools"]) == ["mine__get_weather", "mine__send_email"]
        assert (await http.get("/tools", headers=headers)).json()["tools"] == []
