"""Reading catalogs from files: JSON Lines in the evaluation format, or an MCP `tools/list` JSON."""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.json_values import json_type
from indexer.tools import MAX_NAME_CHARS, ToolProblem, normalize_server_id, qualify, validate_tool
from service.catalog.repair import copy_strings, repair_tool
from service.errors import BadRequest
from service.security.json_body import strict_json

DEMO_CATALOGS = Path(__file__).resolve().parents[1] / "demo" / "catalogs"
DEFAULT_JSONL_SERVER = "catalog"
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class CatalogFile:
    """Raw tools read from a file, and the catalog id of each qualified name (for evaluation)."""

    tools: list[dict[str, Any]]
    ids: dict[str, str]  # qualified name -> catalog id
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # server -> its info block, when the file has one
    repairs: list[str] = field(default_factory=list)  # "file:line: tool: what was changed to keep it" (JSON Lines)
    line_ids: list[str] = field(default_factory=list)  # the catalog id of each of `tools`, in order (JSON Lines)


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
        # utf-8-sig: a byte order mark before the first line (Windows editors write one) is no part of the JSON.
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise BadRequest(
            f"{path}:{line}: not UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
            file=str(path),
            line=line,
        ) from exc


def _json_problem(exc: ValueError) -> str:
    """Why a line is not JSON and where in it (NaN and Infinity, which the stdlib would read, included: JSON has
    neither). The parser's message alone named no place: "Unterminated string starting at"."""
    return f"{exc.msg}: column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)


def _file_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The numbered non-blank lines of a JSON Lines file, read one at a time: the whole text, its lines and their
    values were held at once (a peak RSS of 532 MB reading a 224 MB file of 2,000 tools of 100 KB descriptions;
    now 94 MB, the interpreter included), where a tool keeps at most 16,000 characters of its description. Only LF
    ends a line (see jsonl_lines); a byte order mark before the first is no part of it."""
    offset = 0
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            start = 3 if number == 1 and raw.startswith(codecs.BOM_UTF8) else 0
            try:
                line = raw[start:].removesuffix(b"\n").decode("utf-8")
            except UnicodeDecodeError as exc:
                at = start + exc.start
                raise BadRequest(
                    f"{path}:{number}: not UTF-8 (byte 0x{raw[at]:02x} at offset {offset + at})",
                    file=str(path),
                    line=number,
                ) from exc
            offset += len(raw)
            if line.strip():
                yield number, line


def jsonl_lines(text: str) -> list[tuple[int, str]]:
    """The numbered non-blank lines of a JSON Lines text. Only LF (and CRLF) end a line: str.splitlines() also
    split at U+2028, U+0085 and U+001C-U+001E, which a JSON string may hold unescaped (`ensure_ascii=False`
    writes them so), and cut such a line in two."""
    return [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]


def dataset_json(line: str) -> tuple[Any, str | None]:
    """A dataset line's value, and what had to be overlooked to read it: the strict reader's refusals (a key given
    twice, NaN, a lone surrogate) are data a public dataset carries, most often in fields nobody reads here; read
    as Python's json module reads them (the last of a key wins), but NaN, Infinity and numbers past the floats as
    null (as an MCP client would send them) and lone surrogates as U+FFFD."""
    try:
        return strict_json(line), None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        value = json.loads(line, parse_constant=lambda _: None, parse_float=_finite_or_none)
        return copy_strings(value, lambda text: _SURROGATE.sub("\ufffd", text)), str(exc)


def _finite_or_none(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None


def _mistyped_fields(item: dict[str, Any]) -> list[str]:
    """What a line gives in a field of the wrong JSON type, which the tool goes without (before, silently: a
    `description` of 5 or of a list registered the tool with none, a `name` of 123 took the id)."""
    fields = (("name", str, "a string", "the id used"), ("description", str, "a string", "left out"),
              ("annotations", dict, "an object", "left out"))
    return [
        f"{key} was {json_type(item[key])}, not {described}: {instead}"
        for key, kind, described, instead in fields
        if item.get(key) is not None and not isinstance(item[key], kind)
    ]


def _text(value: Any) -> str | None:
    """A non-blank string field, else None."""
    return value if isinstance(value, str) and value.strip() else None


def _from_jsonl(path: Path, lines: Iterable[tuple[int, str]], server: str | None) -> CatalogFile:
    tools: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    repairs: list[str] = []
    catalog = CatalogFile(tools, ids, repairs=repairs)
    for number, line in lines:
        try:
            item, overlooked = dataset_json(line)
        except (ValueError, RecursionError) as exc:
            reason = _json_problem(exc) if isinstance(exc, ValueError) else "nested too deeply"
            raise BadRequest(f"{path}:{number}: not valid JSON ({reason})", file=str(path), line=number) from exc
        if not isinstance(item, dict) or (_text(item.get("name")) or _text(item.get("id"))) is None:
            raise BadRequest(f"{path}:{number}: each line must be an object with a name", file=str(path), line=number)
        tool_id = str(item["id"]) if item.get("id") is not None else item["name"]
        tool, notes = repair_tool(
            {
                "server": _text(item.get("server")) or server or DEFAULT_JSONL_SERVER,
                "name": _text(item.get("name")) or tool_id,
                "description": _description(item),
                "input_schema": item.get("input_schema") or item.get("inputSchema") or {},
                "annotations": item.get("annotations") or {},
                "tags": item.get("tags") or [],
            }
        )
        notes[:0] = ([f"read past {overlooked}"] if overlooked else []) + _mistyped_fields(item)
        _admit(catalog, tool, tool_id, number, notes)
        if notes:
            repairs.append(f"{path.name}:{number}: {_shown(tool['name'])}: {'; '.join(notes)}")
        tools.append(tool)
    return catalog


def _shown(name: str) -> str:
    """A name as a repair line shows it: one of 256 characters filled the screen."""
    return name if len(name) <= 80 else f"{name[:77]}..."


def _admit(catalog: CatalogFile, tool: dict[str, Any], tool_id: str, number: int, notes: list[str]) -> None:
    """Map the qualified name the registration will give the tool to its catalog id. The name is the one the
    registration derives (the repaired, stripped name, the server made an id), else a repaired name (cut past
    256 characters, invisible characters left out) found nothing by its catalog id. A name the registration
    would still refuse (nothing left of it) becomes the id; a second tool of one qualified name is told apart
    by its id, or its line."""
    for key in ("server", "name"):
        if not (tool[key] or "").strip():
            tool[key] = DEFAULT_JSONL_SERVER if key == "server" else tool_id
            notes.append(f"{key} was blank once its invisible characters were left out: {tool[key]!r}")
    base = tool["name"]
    suffixes = [f"_{tool_id}" if len(tool_id) <= 64 else f"_{hashlib.sha1(tool_id.encode()).hexdigest()[:8]}",
                f"_{number}"]
    while True:
        qualified = _qualified(tool)
        if qualified not in catalog.ids or not suffixes:
            break
        # Same name twice on one server in a file: keep both, told apart by their catalog ids.
        suffix = suffixes.pop(0)
        tool["name"] = base[: MAX_NAME_CHARS - len(suffix)] + suffix
    catalog.ids[qualified] = tool_id
    catalog.line_ids.append(tool_id)


def _qualified(tool: dict[str, Any]) -> str:
    """The qualified name register_tools gives a dataset's tool (its server made an MCP-safe id, then validated)."""
    checked = validate_tool(0, {**tool, "server": normalize_server_id(tool["server"])})
    if isinstance(checked, ToolProblem):  # refused all the same: registered under no name, reported by its line
        return qualify(normalize_server_id(tool["server"]), tool["name"].strip())
    return checked.qualified_name


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
    line_ids = [str(t["name"]) if isinstance(t, dict) and "name" in t else "" for t in tools]
    return CatalogFile(tools, ids, {server: info} if isinstance(info, dict) else {}, line_ids=line_ids)


def load_catalog_file(path: Path, server: str | None = None) -> CatalogFile:
    """Read a catalog: JSON Lines in the evaluation format (`.jsonl`, or any file holding more than one JSON
    value, or one tool object), otherwise an MCP tools/list JSON (server from the file name unless given)."""
    if not path.exists() or path.is_dir():  # not is_file(): a pipe (`--catalog <(...)`) is read as well
        said = "a folder, not a catalog file" if path.is_dir() else "no such file"
        raise BadRequest(f"{path}: {said}", file=str(path))
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return _from_jsonl(path, _file_lines(path), server)
    text = _read_text(path)
    try:
        data = strict_json(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # a catalog.json of one tool a line, as the evaluation format writes
            return _from_jsonl(path, jsonl_lines(text), server)
        where = f"line {exc.lineno} column {exc.colno}"
        raise BadRequest(f"{path}: not valid JSON ({exc.msg}: {where})", file=str(path)) from exc
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise BadRequest(f"{path}: not valid JSON ({reason})", file=str(path)) from exc
    if isinstance(data, dict) and not {"tools", "result"} & data.keys() and {"id", "name"} & data.keys():
        return _from_jsonl(path, jsonl_lines(text), server)  # one line of the evaluation format
    return _from_tools_list(path, data, server)


def demo_catalog() -> list[dict[str, Any]]:
    """The bundled tool lists of eight real MCP servers (85 tools)."""
    tools: list[dict[str, Any]] = []
    for path in sorted(DEMO_CATALOGS.glob("*.json")):
        tools.extend(load_catalog_file(path).tools)
    return tools
