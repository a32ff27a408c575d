"""Repairs of a tool read from a public dataset's JSON Lines (the evaluation format), so that a line the
registration would refuse is kept for retrieval instead of lost: parameter types written as Python or Java names
(`str`, `int`, `dict`, `List`), `required` written on a property, `items` given as a type name, a description
past the registration's limit, invisible characters (zero-width spaces, soft hyphens, byte order marks in scraped
text; indexer/screening.py refuses them). What cannot be repaired is left out (the schema, the tags, the
annotations), never the tool. Every repair is reported with the file's line. Pure functions.

Only for dataset files: a server's own `tools/list` and a REST registration are refused as they are, because
their schemas validate the arguments of real calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from indexer.screening import candidate_characters, hidden_character
from indexer.tools import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, MAX_TAG_CHARS, MAX_TAGS, ToolProblem, validate_tool

TYPE_ALIASES = {
    **dict.fromkeys(("str", "string", "text", "char", "date", "datetime", "time", "uuid", "url", "email"), "string"),
    **dict.fromkeys(("int", "integer", "long", "short", "int32", "int64"), "integer"),
    **dict.fromkeys(("float", "double", "number", "decimal", "numeric", "real"), "number"),
    **dict.fromkeys(("bool", "boolean"), "boolean"),
    **dict.fromkeys(("dict", "object", "map", "json", "hashmap", "mapping"), "object"),
    **dict.fromkeys(("list", "array", "tuple", "set", "sequence"), "array"),
    **dict.fromkeys(("null", "none", "nonetype"), "null"),
}
JSON_TYPES = frozenset(TYPE_ALIASES.values())


def _json_type(value: Any) -> str | None:
    """The JSON Schema type a written type names (`List[str]` is an array, `Optional[int]` an integer)."""
    if not isinstance(value, str):
        return None
    name = value.strip().lower()
    for wrapper in ("optional[", "typing.optional["):
        if name.startswith(wrapper) and name.endswith("]"):
            name = name[len(wrapper) : -1]
    base = name.split("[", 1)[0].split("<", 1)[0].strip()
    return TYPE_ALIASES.get(base)


def _repair_type(node: dict[str, Any]) -> None:
    written = node.get("type")
    if isinstance(written, list):
        kept = list(dict.fromkeys(t for t in (_json_type(w) for w in written) if t))
        if kept:
            node["type"] = kept if len(kept) > 1 else kept[0]
        else:
            del node["type"]
    elif written is not None and written not in JSON_TYPES:
        json_type = _json_type(written)
        if json_type:
            node["type"] = json_type
        else:
            del node["type"]  # a type no alias names: the parameter's text stays, its type goes


def _repair_node(node: dict[str, Any]) -> None:
    """One schema object in place (iteratively: deep schemas cannot exhaust the stack)."""
    stack = [node]
    while stack:
        item = stack.pop()
        _repair_type(item)
        properties = item.get("properties")
        if isinstance(properties, list):  # [{"name": ..., "type": ...}], as some datasets write parameters
            named = {p["name"]: {k: v for k, v in p.items() if k != "name"} for p in properties
                     if isinstance(p, dict) and isinstance(p.get("name"), str)}
            properties = item["properties"] = named
        elif properties is not None and not isinstance(properties, dict):
            del item["properties"]
            properties = None
        required = item.get("required")
        if isinstance(required, str):
            item["required"] = [required]
        elif required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
            del item["required"]  # `required: true` on a property: moved to its parent below
        if isinstance(properties, dict):
            flagged = []
            for name, child in list(properties.items()):
                if isinstance(child, str):  # {"city": "str"}
                    child = properties[name] = {"type": child} if _json_type(child) else {"description": child}
                if not isinstance(child, dict):
                    properties[name] = {}
                    continue
                if child.get("required") is True:
                    flagged.append(name)
                stack.append(child)
            if flagged:
                item["required"] = list(dict.fromkeys([*item.get("required", []), *flagged]))
        items = item.get("items")
        if isinstance(items, str):
            item["items"] = {"type": _json_type(items)} if _json_type(items) else {}
        elif isinstance(items, dict):
            stack.append(items)


def repair_schema(schema: Any) -> tuple[Any, list[str]]:
    """A dataset's schema in the form the registration accepts, and what was changed. Repaired in place: the
    caller owns it (repair_tool's copy of the line)."""
    if schema in (None, {}, [], ""):
        return {}, []
    if not isinstance(schema, dict):
        return {}, [f"input_schema was {type(schema).__name__}, not an object: left out"]
    before = repr(schema)
    repaired = schema
    _repair_node(repaired)
    if repaired.get("type") not in (None, "object"):
        repaired = {"type": "object", "properties": {"input": repaired}}
    return repaired, ([] if repr(repaired) == before else ["input_schema written in JSON Schema's own types"])


def copy_strings(value: Any, text: Callable[[str], str] = str) -> Any:
    """A deep copy with `text` applied to every string, keys included; iterative (a dataset's line can nest deeper
    than the registration's limit)."""
    stack_root: dict[str, Any] = {}
    stack = [(stack_root, "v", value)]
    while stack:
        parent, key, item = stack.pop()
        if isinstance(item, dict):
            keys = {k: text(k) if isinstance(k, str) else k for k in item}
            copy: Any = dict.fromkeys(keys.values())  # the keys in their order; the values filled as they are copied
            stack.extend((copy, keys[k], v) for k, v in item.items())
        elif isinstance(item, list):
            copy = [None] * len(item)
            stack.extend((copy, i, v) for i, v in enumerate(item))
        else:
            copy = text(item) if isinstance(item, str) else item
        parent[key] = copy
    return stack_root["v"]


MAX_HIDDEN_ONE_BY_ONE = 64


def without_hidden(text: str) -> str:
    """The text without the characters the registration refuses as invisible (indexer/screening.py): scraped text
    carries zero-width spaces, soft hyphens and byte order marks, which hide nothing there. Past a few, every
    candidate goes at once (a joiner between two emoji too), so that a string full of them costs one pass."""
    for _ in range(MAX_HIDDEN_ONE_BY_ONE):
        found = hidden_character(text)
        if found is None:
            return text
        text = text[: found.position] + text[found.position + 1 :]
    return candidate_characters().sub("", text)


def repair_tool(tool: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A dataset line's tool that the registration keeps, and what was changed to keep it."""
    notes: list[str] = []
    fixed = copy_strings(tool, without_hidden)
    if fixed != tool:
        notes.append("invisible characters left out")
    for key, limit in (("name", MAX_NAME_CHARS), ("description", MAX_DESCRIPTION_CHARS)):
        if isinstance(fixed.get(key), str) and len(fixed[key]) > limit:
            notes.append(f"{key} cut to {limit} characters")
            fixed[key] = fixed[key][:limit]
    fixed["input_schema"], schema_notes = repair_schema(fixed.get("input_schema"))
    notes += schema_notes
    tags = fixed.get("tags")
    tags = [tags] if isinstance(tags, str) else tags if isinstance(tags, list) else []
    kept_tags = [t for t in tags if isinstance(t, str) and 0 < len(t) <= MAX_TAG_CHARS][:MAX_TAGS]
    if kept_tags != fixed.get("tags", []):
        notes.append("tags kept as a list of short strings")
    fixed["tags"] = kept_tags
    if not isinstance(fixed.get("annotations"), dict):
        fixed["annotations"] = {}
    # Whatever the registration still refuses is left out, field by field: the tool stays.
    for _ in range(3):
        problem = validate_tool(0, fixed)
        if not isinstance(problem, ToolProblem) or problem.field not in ("input_schema", "annotations"):
            break
        notes.append(f"{problem.field} left out ({problem.reason})")
        fixed[problem.field] = {}
    return fixed, notes
