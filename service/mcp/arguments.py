"""The arguments of the front end's meta-tools, checked with the same InvalidArguments as the REST API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.errors import InvalidArguments
from service.security.json_body import strict_json
from service.security.route_errors import nearest_field


def known_arguments(arguments: Mapping[str, Any], tool: str, names: tuple[str, ...]) -> None:
    """Refuse an argument the meta-tool `tool` does not take, naming the ones it does and the nearest."""
    unknown = [str(key) for key in arguments if key not in names]
    if not unknown:
        return
    errors = []
    for key in unknown[:5]:
        close = nearest_field(key, names)
        hint = f"; did you mean {close}?" if close else ""
        reason = f"not an argument of {tool} (its arguments: {', '.join(names)}{hint})"
        errors.append({"pointer": f"/{key[:64]}", "reason": reason})
    said = "; ".join(f"`{e['pointer'][1:]}` is {e['reason']}" for e in errors)
    raise InvalidArguments(said, errors=errors)


def string_argument(arguments: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    """The string argument `key` (None when absent and not required)."""
    value = arguments.get(key)
    if value is None or value == "":
        if required:  # with the names given instead: `qery` for `query` was only "`query` is required"
            given = [repr(str(name)[:64]) for name in list(arguments)[:5] if name != key]
            said = f" (given: {', '.join(given)})" if given else ""
            raise InvalidArguments(f"`{key}` is required{said}", errors=[{"pointer": f"/{key}", "reason": "required"}])
        return None
    if not isinstance(value, str):
        raise InvalidArguments(f"`{key}` must be a string", errors=[{"pointer": f"/{key}", "reason": "not a string"}])
    if required and not value.strip():  # else the API's refusal names its own field, /body/query
        raise InvalidArguments(f"`{key}` must not be blank", errors=[{"pointer": f"/{key}", "reason": "blank"}])
    return value


def integer_argument(arguments: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    """The integer argument `key` within low..high (None when absent); 2.0 counts as 2."""
    value = arguments.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidArguments(
            f"`{key}` must be an integer {bounds}",
            errors=[{"pointer": f"/{key}", "reason": f"integer {bounds}"}],
        )
    return value


def object_argument(arguments: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """The object argument `key` (None when absent), or the object its JSON text holds: models write
    `"arguments": "{\\"city\\": \\"Paris\\"}"` often enough that FastMCP reads such text too."""
    value = arguments.get(key)
    if isinstance(value, str):
        try:
            value = strict_json(value)
        except (ValueError, RecursionError):
            raise InvalidArguments(
                f"`{key}` must be an object (a string was given, and it is not the JSON text of one)",
                errors=[{"pointer": f"/{key}", "reason": "not an object"}],
            ) from None
    if value is not None and not isinstance(value, dict):
        raise InvalidArguments(f"`{key}` must be an object", errors=[{"pointer": f"/{key}", "reason": "not an object"}])
    return value


def search_arguments(arguments: Mapping[str, Any], max_k: int) -> tuple[str, int | None, str | None]:
    """The query, k and server of a search_tools call."""
    known_arguments(arguments, "search_tools", ("query", "k", "server"))
    query = string_argument(arguments, "query", required=True)
    return str(query), integer_argument(arguments, "k", 1, max_k), string_argument(arguments, "server", required=False)


def help_query(arguments: Mapping[str, Any], tool: str) -> str:
    """The query of a grouped mode's help_<server> call."""
    known_arguments(arguments, tool, ("query",))
    return str(string_argument(arguments, "query", required=True))


def call_arguments(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """The tool name, its arguments and the approval id of a call_tool call."""
    known_arguments(arguments, "call_tool", ("name", "arguments", "approval_id"))
    name = string_argument(arguments, "name", required=True)
    inner = object_argument(arguments, "arguments") or {}
    return str(name), inner, string_argument(arguments, "approval_id", required=False)


def fetch_arguments(arguments: Mapping[str, Any]) -> tuple[str, int | None]:
    """The result id and offset of a fetch_result call."""
    known_arguments(arguments, "fetch_result", ("result_id", "offset"))
    return str(string_argument(arguments, "result_id", required=True)), integer_argument(arguments, "offset", 0)


def run_arguments(arguments: Mapping[str, Any]) -> tuple[str, list[str], float | None]:
    """The script, approval ids and wall-clock budget of a run_script call."""
    known_arguments(arguments, "run_script", ("script", "approval_ids", "timeout_seconds"))
    script = string_argument(arguments, "script", required=True)
    approvals = arguments.get("approval_ids") or []
    if not isinstance(approvals, list) or not all(isinstance(a, str) for a in approvals):
        raise InvalidArguments(
            "`approval_ids` must be a list of strings",
            errors=[{"pointer": "/approval_ids", "reason": "not a list of strings"}],
        )
    timeout = arguments.get("timeout_seconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise InvalidArguments(
            "`timeout_seconds` must be a positive number",
            errors=[{"pointer": "/timeout_seconds", "reason": "not a positive number"}],
        )
    return str(script), approvals, timeout
