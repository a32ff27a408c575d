"""Argument types of the `toolscout bench` commands: a wrong value is argparse's one-line refusal (exit 2) before
anything starts, not a traceback (or a StatisticsError) minutes later."""

from __future__ import annotations

import argparse
import json


def positive_int(text: str) -> int:
    """A count of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def whole_int(text: str) -> int:
    """A count of at least 0 (warm-up calls)."""
    return 0 if text.strip() == "0" else positive_int(text)


def positive_ints(text: str) -> list[int]:
    """A comma-separated list of counts: `1000,10000`."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}")
    return [positive_int(p.strip()) for p in parts]


def json_object(text: str) -> dict[str, object]:
    """A JSON object (tool arguments)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object of arguments, got {text!r}")
    return value
