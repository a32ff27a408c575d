"""What Starlette's bare "Not Found" and "Method Not Allowed", and pydantic's "Extra inputs are not permitted", leave
out: what was asked, and where to look.

A newcomer's `curl http://127.0.0.1:8765/search` (a GET) was told "Method Not Allowed", `/docs`, off by default,
"Not Found", as a misspelt route is, and `{"server": [...]}` on /search not which fields there are."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.exceptions import HTTPException

DOCS_UI_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")
# Other APIs' names for a field of ours, that spelling alone does not bring near: Anthropic's tool_use block holds
# `input`, other gateways `args` or `parameters`; `limit` or `top_k` for k. (/execute's `input` was named with the
# route's fields but no nearest; the MCP front end's call_tool ran the tool without its arguments.)
FIELD_ALIASES = {
    "arguments": ("input", "args", "parameters", "params", "tool_input", "tool_args", "kwargs"),
    "name": ("tool", "tool_name", "toolName", "function"),
    "query": ("q", "task", "text", "request", "prompt"),
    "k": ("limit", "top_k", "topK", "n", "max_results"),
}


def nearest_field(key: str, names: list[str] | tuple[str, ...]) -> str | None:
    """The field of `names` that `key` meant: one it is another API's name for, else the closest spelling."""
    aliased = [name for name in names if key in FIELD_ALIASES.get(name, ())]
    close = aliased or difflib.get_close_matches(key, names, n=1)
    return close[0] if close else None


def api_paths(app: FastAPI) -> list[str]:
    """The paths /openapi.json lists (the document is built once, then cached on the app)."""
    return list(app.openapi().get("paths", {}))


def http_detail(method: str, path: str, exc: HTTPException, routes: Iterable[str] = ()) -> str:
    """The problem's detail for a router's 404 (with the nearest of the API's `routes`, as /openapi.json lists them)
    or 405 (`path` as echoed); another HTTP error's own detail."""
    if exc.status_code == 404 and exc.detail == "Not Found":
        if path in DOCS_UI_PATHS:
            return (
                "Swagger UI (/docs) and ReDoc (/redoc) are off: TOOLSCOUT_DOCS_UI=true serves them (their scripts come "
                "from a CDN); the OpenAPI document is at /openapi.json"
            )
        # `/analytics/unanswered`, as the CLI names it, is /analytics/searches/unanswered: only "Nothing at".
        near = difflib.get_close_matches(path, [r for r in routes if "{" not in r], n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]}?)" if near else ""
        return f"Nothing at {path}{hint}: the API's routes are in /openapi.json"
    if exc.status_code == 405 and exc.detail == "Method Not Allowed":
        allowed = (exc.headers or {}).get("Allow")
        return f"{method[:16]} is not a method of {path}" + (f": it takes {allowed}" if allowed else "")
    return str(exc.detail)


def json_position(doc: Any, pos: Any) -> str:
    """Where in a body a JSON error is, as line and column (the character offset when the text is not at hand)."""
    if not isinstance(pos, int):
        return ""
    if not isinstance(doc, str):
        return f" at character {pos + 1}"
    line, line_start = doc.count("\n", 0, pos) + 1, doc.rfind("\n", 0, pos) + 1
    return f" at line {line}, column {pos - line_start + 1}"


def unreadable_body(cause: BaseException) -> str:
    """Why a body that the JSON parser gave up on (other than with a JSONDecodeError) is not valid JSON."""
    if isinstance(cause, UnicodeDecodeError):
        return f"not valid JSON: not UTF-8 (byte 0x{cause.object[cause.start]:02x} at offset {cause.start})"
    if isinstance(cause, RecursionError):
        return "not valid JSON for this service: arrays and objects nest too deeply"
    return f"not valid JSON: {str(cause).splitlines()[0] if str(cause) else type(cause).__name__}"


def extra_field_reason(route: object, loc: tuple[int | str, ...], reason: str) -> str:
    """Pydantic's "Extra inputs are not permitted" for a body field the route does not define, with the fields of
    that object and the nearest (`/body/server` of /search: did you mean servers?), as an unknown query parameter
    names the route's parameters."""
    body_field = getattr(route, "body_field", None)
    if body_field is None or not loc or loc[0] != "body":
        return reason
    model = _model_at(body_field.field_info.annotation, loc[1:-1])
    if model is None:
        return reason
    names = [field.alias or name for name, field in model.model_fields.items()]
    close = nearest_field(str(loc[-1]), names)
    hint = f"; did you mean {close}?" if close else ""
    return f"{reason} (its fields: {', '.join(names)}{hint})"


def _model_at(annotation: Any, parts: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model of the object at `parts` under a body of this annotation (through lists and optional values)."""
    current = _model_or_list(annotation)
    for part in parts:
        if current is None:
            return None
        if isinstance(part, int):
            args = get_args(current) if get_origin(current) is list else ()
            current = _model_or_list(args[0]) if args else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part) or next(
                (f for f in current.model_fields.values() if f.alias == part), None
            )
            current = _model_or_list(field.annotation) if field is not None else None
        else:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _model_or_list(annotation: Any) -> Any:
    """A model or a list type, out of `X | None` and `Annotated[X, ...]`; else None."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):
        found = [_model_or_list(arg) for arg in get_args(annotation)]
        return next((f for f in found if f is not None), None)
    if get_origin(annotation) is list or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return annotation
    return None
