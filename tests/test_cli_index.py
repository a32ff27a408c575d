"""`toolscout index` through a running service shows its progress a part (1,000 tools) at a time: registering
Seal-Tools' 4,076 tools said nothing for a minute and a half, where the local path has a progress bar."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from indexer.embedding import HashingEmbedder
from service.cli import main
from service.main import create_app
from tests.mcp.conftest import make_settings, serving
from tests.processes import free_port


async def test_index_through_the_service_shows_each_part_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "catalog.jsonl"
    lines = [
        {"id": f"t{i}", "name": f"tool_{i}", "description": f"Tool number {i} of the catalog", "server": "big"}
        for i in range(2500)
    ]
    catalog.write_text("".join(json.dumps(line) + "\n" for line in lines))
    app = create_app(make_settings(tmp_path / "service"), embedder=HashingEmbedder())
    async with serving(app, free_port()) as url:
        monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", url)
        monkeypatch.delenv("TOOLSCOUT_FRONTEND__API_KEY", raising=False)
        assert await anyio.to_thread.run_sync(main, ["index", str(catalog)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "created 2500, updated 0, unchanged 0, rejected 0, held for review 0"
    shown = [part.split("  ")[0] for part in err.strip("\n").split("\r") if part]
    assert shown == [
        "[############..................] 1000/2500 tools",
        "[########################......] 2000/2500 tools",
        "[##############################] 2500/2500 tools",
    ]
    assert err.endswith(" tools/s\n")


async def test_index_through_the_service_keeps_each_part_under_its_body_limit_and_names_refusals_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A part of 1,000 tools of long (or non-Latin: three bytes a character) descriptions was past the service's
    body limit: a 413 stopped the command after the parts before it had registered. A part too large is sent
    again in halves; the refusals of a later part were named by their place in that part (/body/tools/3 for the
    file's tool 1,003)."""
    forecast = "天气预报" * 300
    tools = [{"name": f"tool_{i}", "description": forecast, "inputSchema": {"type": "object"}} for i in range(1200)]
    tools[1003]["inputSchema"] = {"type": "array"}
    tools[1100]["description"] = "数据" * 200_000  # one tool larger than the service takes
    listing = tmp_path / "wide.json"
    listing.write_text(json.dumps({"tools": tools}, ensure_ascii=False))
    settings = make_settings(tmp_path / "service")
    settings.policy.max_body_bytes = 1_000_000  # ~3,600 bytes a tool: 1,000 were 3.6 MB
    app = create_app(settings, embedder=HashingEmbedder())
    async with serving(app, free_port()) as url:
        monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", url)
        monkeypatch.delenv("TOOLSCOUT_FRONTEND__API_KEY", raising=False)
        assert await anyio.to_thread.run_sync(main, ["index", str(listing), "--server", "wide"]) == 0
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "created 1198, updated 0, unchanged 0, rejected 2, held for review 0"
    assert lines[1] == (
        "  rejected tool_1003 (/body/tools/1003/inputSchema): input_schema must describe an object (type \"object\"),"
        " not 'array'"
    )
    assert lines[2].startswith("  rejected tool_1100 (/body/tools/1100): The request body is larger than the limit")


async def test_index_through_the_service_waits_out_the_rate_limit_its_parts_bodies_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A part's body costs a rate-limit token per 64 KiB begun (policy.body_kib_per_token): parts sent faster than
    the bucket refills met a 429, which stopped the command after the parts before it had registered."""
    catalog = tmp_path / "catalog.jsonl"
    padding = "x" * 600
    lines = [{"name": f"tool_{i}", "description": f"Tool {i} {padding}", "server": "big"} for i in range(2500)]
    catalog.write_text("".join(json.dumps(line) + "\n" for line in lines))
    settings = make_settings(tmp_path / "service")
    settings.policy.rate_limit_per_minute, settings.policy.rate_limit_burst = 60, 3  # a token a second
    app = create_app(settings, embedder=HashingEmbedder())
    async with serving(app, free_port()) as url:
        monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", url)
        monkeypatch.delenv("TOOLSCOUT_FRONTEND__API_KEY", raising=False)
        assert await anyio.to_thread.run_sync(main, ["index", str(catalog)]) == 0  # parts of ~650 KB: the burst each
    out, _ = capsys.readouterr()
    assert out.splitlines()[0] == "created 2500, updated 0, unchanged 0, rejected 0, held for review 0"
