"""Bounds on the JSON values a tool carries (its input schema and annotations): how deep they nest, how large its
annotations are, which integers the catalog keeps exactly. Pure functions, iterative: a hostile value cannot exhaust
the stack."""

from __future__ import annotations

import json
from typing import Any

from indexer.json_pointer import pointer_token

MAX_SCHEMA_DEPTH = 32  # nesting of objects and arrays; deeper schemas are refused before any recursion
# MCP's annotations are a title and four hints (under 100 bytes in every bundled catalog), and every listing of the
# tool carries them: an upstream's 5 MB title reached each search result and GET /tools page of the tool.
MAX_ANNOTATIONS_BYTES = 16_000
# The integers the vector index keeps exactly in a tool's payload (i64 and u64); past them qdrant_edge made
# 2**64 a float and refused 10**30 (a 500), and orjson could not write them into a /search answer.
INTEGER_RANGE = (-(2**63), 2**64 - 1)


def depth(value: Any) -> int:
    """How deeply objects and arrays nest, counted up to just past MAX_SCHEMA_DEPTH."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > MAX_SCHEMA_DEPTH:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def annotations_problem(annotations: dict[str, Any]) -> str | None:
    """Why a tool's annotations cannot be kept (None when they can)."""
    if depth(annotations) > MAX_SCHEMA_DEPTH:
        return f"annotations nest deeper than {MAX_SCHEMA_DEPTH} levels (MAX_SCHEMA_DEPTH)"
    try:
        size = len(json.dumps(annotations, ensure_ascii=False))
    except (TypeError, ValueError):
        return "annotations must be plain JSON"
    if size > MAX_ANNOTATIONS_BYTES:
        return f"annotations are larger than {MAX_ANNOTATIONS_BYTES} bytes (MAX_ANNOTATIONS_BYTES)"
    return None


# MCP's ToolAnnotations: the front end lists a tool with them (service/mcp/render.py), and MCP's model refused a
# title of 5 or a hint of "maybe", which made the whole tools/list of a full, grouped or dynamic front end fail.
MCP_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def mcp_annotation_problem(annotations: dict[str, Any]) -> tuple[str, str] | None:
    """The JSON pointer (inside the annotations) and reason of a key MCP defines given a value of another type."""
    title = annotations.get("title")
    if title is not None and not isinstance(title, str):
        return "/title", f"annotations title must be a string (MCP), not {json_type(title)}"
    for hint in MCP_HINTS:
        value = annotations.get(hint)
        if value is not None and not isinstance(value, bool):
            return f"/{hint}", f"annotations {hint} must be a boolean (MCP), not {json_type(value)}"
    return None


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for a reason that says what was sent."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
    names[dict] = "an object"
    return "null" if value is None else names.get(type(value), type(value).__name__)


def outsized_integer(value: Any) -> tuple[str, int] | None:
    """The JSON pointer and value of the first integer outside INTEGER_RANGE, in document order."""
    low, high = INTEGER_RANGE
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        pointer, item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool) and not low <= item <= high:
            return pointer, item
        if isinstance(item, dict):
            children = [(f"{pointer}/{pointer_token(k)}", v) for k, v in item.items()]
        elif isinstance(item, list):
            children = [(f"{pointer}/{i}", v) for i, v in enumerate(item)]
        else:
            continue
        stack.extend(reversed(children))
    return None
