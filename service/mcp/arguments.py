"""The arguments of the front end's meta-tools, checked with the same InvalidArguments as the REST API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.errors import InvalidArguments


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
    """The object argument `key` (None when absent)."""
    value = arguments.get(key)
    if value is not None and not isinstance(value, dict):
        raise InvalidArguments(f"`{key}` must be an object", errors=[{"pointer": f"/{key}", "reason": "not an object"}])
    return value


def run_arguments(arguments: Mapping[str, Any]) -> tuple[str, list[str], float | None]:
    """The script, approval ids and wall-clock budget of a run_script call."""
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
