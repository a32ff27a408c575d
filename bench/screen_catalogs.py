"""The false positives of the tool-text checks (indexer/screening.py) on catalogs of legitimate tools: every tool
of every file given is checked for invisible characters (refused) and poisoning signatures (held), and each hit is
printed for inspection.

Usage: python bench/screen_catalogs.py FILE_OR_FOLDER ... [--extra-field description_for_model]
Files are JSON Lines catalogs (`{name, description, input_schema}` a line) or MCP `tools/list` JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from indexer.screening import find_hidden, find_instruction


def _tools(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    document = json.loads(path.read_text())
    return list(document.get("tools", [])) if isinstance(document, dict) else []


def _fields(tool: dict[str, Any], extra: list[str]) -> dict[str, Any]:
    fields = {
        "name": tool.get("name", ""),
        "description": tool.get("description") or "",
        "input_schema": tool.get("input_schema", tool.get("inputSchema")) or {},
        "annotations": tool.get("annotations") or {},
    }
    fields.update({name: tool[name] for name in extra if isinstance(tool.get(name), str)})
    return fields


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--extra-field", action="append", default=[], help="also check this field of each tool")
    args = parser.parse_args()
    files = [f for p in args.paths for f in (sorted(p.rglob("*.json*")) if p.is_dir() else [p])]
    for path in files:
        tools = [t for t in _tools(path) if isinstance(t, dict)]
        hidden, held = [], []
        for tool in tools:
            fields = _fields(tool, args.extra_field)
            if (found := find_hidden(fields)) is not None:
                hidden.append((tool.get("name"), found.reason))
            if (found := find_instruction(fields)) is not None:
                held.append((tool.get("name"), found.reason))
        print(f"{path}: {len(tools)} tools, {len(hidden)} refused (invisible characters), {len(held)} held")
        for name, reason in hidden + held:
            print(f"  {name}: {reason}")


if __name__ == "__main__":
    main()
