"""RFC 6901 JSON pointers: where a value sits inside a document."""

from __future__ import annotations

from typing import Any


def pointer_token(key: Any) -> str:
    """One key or index of a JSON pointer, escaped (`~` as `~0`, `/` as `~1`)."""
    return str(key).replace("~", "~0").replace("/", "~1")
