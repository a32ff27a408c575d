"""Argument values kept out of the execution log's error detail when raw arguments are not logged.

An upstream's error message often quotes what it was given ("login failed for password 'hunter2'"): stored as it
came, it put in the log exactly the values that `execution.log_raw_arguments` (off by default) keeps out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from indexer.json_pointer import pointer_token

SHORTEST_REDACTED = 4  # shorter values ("ok", "1", "id") are mostly words of the message itself
MAX_VALUES = 10_000  # a call may carry 2 MB of arguments: looking for the first values found is enough


def _leaves(value: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """(JSON pointer, text) of each scalar in the arguments, as an upstream would write it back."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{pointer}/{pointer_token(key)}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{pointer}/{index}")
    elif isinstance(value, str):
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
    leaves = []
    for count, (pointer, text) in enumerate(_leaves(arguments)):
        if count >= MAX_VALUES:
            break
        if len(text) >= SHORTEST_REDACTED:
            leaves.append((pointer, text))
    longest = max((len(text) for _pointer, text in leaves), default=0)
    window = detail[: limit + longest]
    for pointer, text in sorted(leaves, key=lambda leaf: -len(leaf[1])):  # a value inside a longer one goes with it
        if text in window:
            window = window.replace(text, f"<argument {pointer or '/'}>")
    return window[:limit]
