"""Argument values kept out of the execution log's error detail when raw arguments are not logged.

An upstream's error message often quotes what it was given ("login failed for password 'hunter2'"): stored as it
came, it put in the log exactly the values that `execution.log_raw_arguments` (off by default) keeps out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import islice
from typing import Any

from indexer.json_pointer import pointer_token

SHORTEST_REDACTED = 4  # shorter values ("ok", "1", "id") are mostly words of the message itself
# A call may carry 2 MB of arguments: looking at the first values found is enough. Arrays and objects count as
# values too: counting strings and numbers only, 2 MB of empty arrays (or of `[[[...]]]`) was walked whole.
MAX_VALUES = 10_000


def _children(pointer: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        return ((f"{pointer}/{pointer_token(key)}", item) for key, item in value.items())
    if isinstance(value, list):
        return ((f"{pointer}/{index}", item) for index, item in enumerate(value))
    return iter(())


def _values(value: Any) -> Iterator[tuple[str, Any]]:
    """(JSON pointer, value) of every array, object, string and number in the arguments, in document order,
    without recursing."""
    stack = [_children("", value)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        yield child
        stack.append(_children(*child))


def _leaves(arguments: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(JSON pointer, text) of each scalar among the first MAX_VALUES values, as an upstream would write it back."""
    for pointer, value in islice(_values(arguments), MAX_VALUES):
        if isinstance(value, str):
            yield pointer, value
            # The value as a JSON text writes it: quotes, backslashes, newlines and non-ASCII escaped (\u00e9).
            quoted = json.dumps(value)[1:-1]
            if quoted != value:
                yield pointer, quoted
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield pointer, str(value)


def redact_arguments(detail: str, arguments: dict[str, Any], limit: int) -> str:
    """The detail with every argument value it quotes replaced by `<argument /pointer>`, cut to `limit` characters.

    Values are looked for in a little more than what is kept, so that one cut by the limit is not left half shown."""
    leaves = [(pointer, text) for pointer, text in _leaves(arguments) if len(text) >= SHORTEST_REDACTED]
    longest = max((len(text) for _pointer, text in leaves), default=0)
    window = detail[: limit + longest]
    for pointer, text in sorted(leaves, key=lambda leaf: -len(leaf[1])):  # a value inside a longer one goes with it
        if text in window:
            window = window.replace(text, f"<argument {pointer or '/'}>")
    return window[:limit]
