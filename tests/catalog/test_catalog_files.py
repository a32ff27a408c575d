"""Reading catalogs from JSON Lines: the description field a tool is indexed with."""

from __future__ import annotations

import json
from pathlib import Path

from service.catalog.files import load_catalog_file


def test_a_jsonl_tool_is_described_by_every_description_field_of_its_line(tmp_path: Path) -> None:
    path = tmp_path / "catalog.jsonl"
    lines = [
        {"id": "timeport", "name": "timeport", "description": "A time-travel game.",
         "description_for_model": "Start the game in a moment in history.", "name_for_human": "Timeport"},
        {"id": "plain", "name": "plain", "description": "Only a description."},
        {"id": "same", "name": "same", "description": "Says it once.", "long_description": "Says it once."},
        {"id": "bare", "name": "bare", "description_for_model": "Only the long one.", "description_x": 3},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    descriptions = [t["description"] for t in load_catalog_file(path).tools]
    assert descriptions == [
        "A time-travel game. Start the game in a moment in history.",
        "Only a description.",
        "Says it once.",
        "Only the long one.",
    ]
