"""Reading catalogs from files: JSON Lines in the evaluation format, or an MCP `tools/list` JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.tools import normalize_server_id, qualify
from service.catalog.json_body import strict_json
from service.catalog.repair import repair_tool
from service.errors import BadRequest

DEMO_CATALOGS = Path(__file__).resolve().parents[1] / "demo" / "catalogs"
DEFAULT_JSONL_SERVER = "catalog"


@dataclass
class CatalogFile:
    """Raw tools read from a file, and the catalog id of each qualified name (for evaluation)."""

    tools: list[dict[str, Any]]
    ids: dict[str, str]  # qualified name -> catalog id
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # server -> its info block, when the file has one
    repairs: list[str] = field(default_factory=list)  # "file:line: tool: what was changed to keep it" (JSON Lines)


def _description(item: dict[str, Any]) -> str:
    """The description, followed by any other description field the line carries (`description_for_model` of
    ChatGPT plugins): more of what the tool does to index (MetaTool R@5 +.02, bench/ideas.py)."""
    short = item.get("description") if isinstance(item.get("description"), str) else ""
    extra = [
        v.strip()
        for k, v in item.items()
        if k != "description" and "description" in k.lower() and isinstance(v, str) and v.strip()
    ]
    return " ".join([short.strip(), *(v for v in extra if v not in short)]).strip()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise BadRequest(
            f"{path}:{line}: not UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
            file=str(path),
            line=line,
        ) from exc


def _json_problem(exc: ValueError) -> str:
    """Why a text is not JSON (NaN and Infinity, which the stdlib would read, included: JSON has neither)."""
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)


def _from_jsonl(path: Path, server: str | None) -> CatalogFile:
    tools: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    taken: set[str] = set()
    repairs: list[str] = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = strict_json(line)
        except (ValueError, RecursionError) as exc:
            reason = _json_problem(exc) if isinstance(exc, ValueError) else "nested too deeply"
            raise BadRequest(f"{path}:{number}: not valid JSON ({reason})", file=str(path), line=number) from exc
        if not isinstance(item, dict) or not isinstance(item.get("name") or item.get("id"), str):
            raise BadRequest(f"{path}:{number}: each line must be an object with a name", file=str(path), line=number)
        name = item.get("name") or item["id"]
        tool_server = item.get("server") or server or DEFAULT_JSONL_SERVER
        qualified = qualify(normalize_server_id(tool_server), name)
        if qualified in taken:
            # Same name twice on one server in a file: keep both, told apart by their catalog ids.
            name = f"{name}_{item.get('id', number)}"
            qualified = qualify(normalize_server_id(tool_server), name)
        taken.add(qualified)
        ids[qualified] = str(item.get("id", name))
        tool, notes = repair_tool(
            {
                "server": tool_server,
                "name": name,
                "description": _description(item),
                "input_schema": item.get("input_schema") or item.get("inputSchema") or {},
                "annotations": item.get("annotations") or {},
                "tags": item.get("tags") or [],
            }
        )
        if notes:
            repairs.append(f"{path.name}:{number}: {tool['name']}: {'; '.join(notes)}")
        tools.append(tool)
    return CatalogFile(tools, ids, repairs=repairs)


def _from_tools_list(path: Path, data: Any, server: str | None) -> CatalogFile:
    listed = data.get("tools") if isinstance(data, dict) else data
    if isinstance(data, dict) and isinstance(data.get("result"), dict):
        listed = data["result"].get("tools")
    if not isinstance(listed, list):
        raise BadRequest(f"{path}: expected an MCP tools/list result with a `tools` array", file=str(path))
    server = server or path.stem
    tools = []
    for item in listed:
        if isinstance(item, dict):
            tools.append({**item, "server": item.get("server", server)})
        else:
            tools.append(item)
    ids = {
        qualify(normalize_server_id(t["server"]), t["name"]): t["name"]
        for t in tools
        if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("server"), str)
    }
    # An export may carry the server's own description (`serverInfo` and `instructions`), as the bundled ones do.
    info = data.get("server") if isinstance(data, dict) else None
    return CatalogFile(tools, ids, {server: info} if isinstance(info, dict) else {})


def load_catalog_file(path: Path, server: str | None = None) -> CatalogFile:
    """Read a catalog: `.jsonl` in the evaluation format, otherwise an MCP tools/list JSON (server from the
    file name unless given)."""
    if not path.is_file():
        raise BadRequest(f"{path}: no such file", file=str(path))
    if path.suffix == ".jsonl":
        return _from_jsonl(path, server)
    try:
        data = strict_json(_read_text(path))
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})", file=str(path)) from exc
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise BadRequest(f"{path}: not valid JSON ({reason})", file=str(path)) from exc
    return _from_tools_list(path, data, server)


def demo_catalog() -> list[dict[str, Any]]:
    """The bundled tool lists of eight real MCP servers (85 tools)."""
    tools: list[dict[str, Any]] = []
    for path in sorted(DEMO_CATALOGS.glob("*.json")):
        tools.extend(load_catalog_file(path).tools)
    return tools
