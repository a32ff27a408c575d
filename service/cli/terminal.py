"""Text from callers and upstreams, made safe to print on an operator's terminal."""

from __future__ import annotations

import re

# C0 and C1 controls and the bidirectional overrides: in a terminal they are commands (ESC sequences set the
# clipboard or move the cursor, CR overwrites the line, U+202E reverses what follows), not text.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(value: object) -> str:
    """The value as one line of terminal text: controls written as escapes (a caller's query may hold any)."""
    return _CONTROLS.sub(lambda match: match.group().encode("unicode_escape").decode(), str(value))

