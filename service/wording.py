"""Counts in the words a person reads: `1 tool`, `2 tools`, `0 tools` (JSON fields keep their names)."""

from __future__ import annotations


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """The count and its noun, singular for exactly one (`plural` for a noun that is not the noun plus s)."""
    shown = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{shown} {noun if shown == '1' else plural or noun + 's'}"  # a rate of 0.9999999 reads as 1


def verb(count: float, one: str, many: str) -> str:
    """The verb that agrees with a count: `1 query has`, `2 queries have`."""
    return one if count == 1 else many
