"""The arguments of the front end's meta-tools, checked with the same InvalidArguments as the REST API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.errors import InvalidArguments


def string_argument(arguments: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    """The string argument `key` (None when absent and not required)."""
    value = arguments.get(key)
    if value is None or value == "":
        if required:
            raise InvalidArguments(f"`{key}` is required", errors=[{"pointer": f"/{key}", "reason": "required"}])
        return None
    if not isinstance(value, str):
        raise InvalidArguments(f"`{key}` must be a string", errors=[{"pointer": f"/{key}", "reason": "not a string"}])
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
