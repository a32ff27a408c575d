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
