"""The CLI working straight on a data folder (no service reached): an index another process holds is a one-line
error that says which address the CLI tried, never a stack trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.index.edge import EdgeIndex
from service.cli import main


def test_a_search_on_a_folder_whose_index_is_held_says_which_api_it_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_DEMO_CATALOG", "false")
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")  # nothing listens there
    held = EdgeIndex(tmp_path / "index", 384)  # as a running `toolscout serve` holds it
    try:
        assert main(["search", "what time is it"]) == 1
        assert main(["index", str(Path(__file__).parent / "fixtures" / "retrieval" / "catalog.jsonl")]) == 1
    finally:
        held.close()
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and errors[0] == errors[1]
    assert errors[0].startswith("error: edge index: opening ")
    assert errors[0].endswith(
        f"Is a `toolscout serve` using {tmp_path.resolve()}? The CLI reaches a running service at "
        "TOOLSCOUT_FRONTEND__API_URL (http://127.0.0.1:9): set it to the service's address"
    )
