"""How much of an upstream's stray stdout reaches the log: a stdio server's stdout is its JSON-RPC channel, and a
line that is not a message there (a server printing its own debug output, or one flooding it) is worth a warning
or two, not one per line.

Each stray line was two warnings (the transport's and the session's, with pydantic's three-line parse error): 570
bytes of log a line, 26 MB in 20 s from one call of a server that printed 300,000 lines (1.3 MB/s for as long as
it went on, `tests/security/test_stray_stdout.py`). Now each server logs the first `LOGGED_PER_WINDOW` stray lines
of each `WINDOW_SECONDS`, then once, when the next window opens, how many it left out."""

from __future__ import annotations

import time
from collections.abc import Callable

LOGGED_PER_WINDOW = 5
WINDOW_SECONDS = 60.0


def may_be_message(line: str) -> bool:
    """Whether a stdout line can be a JSON-RPC message at all (an object): any other is stray without parsing it."""
    return line.lstrip().startswith("{")


class StrayLines:
    """Counts one server's stray stdout lines and says which of them to log."""

    def __init__(
        self,
        logged_per_window: int = LOGGED_PER_WINDOW,
        window_seconds: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logged_per_window = logged_per_window
        self.window_seconds = window_seconds
        self.clock = clock
        self._window_started: float | None = None
        self._logged = 0
        self.left_out = 0  # of the current window
        self.total = 0

    def admit(self) -> tuple[bool, int]:
        """Count a stray line: whether to log it, and how many lines the window that just closed left out (to be
        said once, 0 otherwise)."""
        self.total += 1
        now = self.clock()
        closed = 0
        if self._window_started is None or now - self._window_started >= self.window_seconds:
            closed, self.left_out = self.left_out, 0
            self._window_started, self._logged = now, 0
        if self._logged < self.logged_per_window:
            self._logged += 1
            return True, closed
        self.left_out += 1
        return False, closed
