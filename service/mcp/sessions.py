"""Per-session state of the front end: the dynamic-mode activation set and the search that found each tool.

Bounded three ways: at most `max_active` activated tools per session (the least recently used leave first),
at most `max_sessions` sessions (the least recently seen leave first), and a session idle for `idle_seconds`
is forgotten. A forgotten session starts again from the meta-tools; its tools stay callable by name.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SessionState:
    """What one client session has activated and searched."""

    key: str
    last_seen: float
    active: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)  # name -> catalog tool
    search_ids: OrderedDict[str, str] = field(default_factory=OrderedDict)


class SessionStore:
    """Session states by key, bounded in number, size and idle time."""

    def __init__(
        self,
        max_sessions: int,
        max_active: int,
        idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_sessions = max(1, max_sessions)
        self.max_active = max(1, max_active)
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def _expire(self, now: float) -> None:
        while self._sessions:
            key, state = next(iter(self._sessions.items()))
            if now - state.last_seen < self.idle_seconds:
                return
            del self._sessions[key]

    def get(self, key: str) -> SessionState:
        """The session's state, created if needed, and marked as just seen."""
        now = self._clock()
        self._expire(now)
        state = self._sessions.pop(key, None) or SessionState(key=key, last_seen=now)
        state.last_seen = now
        self._sessions[key] = state
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return state

    def peek(self, key: str) -> SessionState | None:
        """The session's state if it is alive, without marking it seen."""
        self._expire(self._clock())
        return self._sessions.get(key)

    def drop(self, key: str) -> None:
        """Forget a session (its connection closed)."""
        self._sessions.pop(key, None)

    def states(self) -> list[SessionState]:
        """Every live session."""
        self._expire(self._clock())
        return list(self._sessions.values())

    def activate(self, state: SessionState, tools: Iterable[Mapping[str, Any]]) -> bool:
        """Add catalog tools (REST shape) to the session's list, most recent last; True when it changed."""
        before = dict(state.active)
        for tool in tools:
            name = str(tool["name"])
            state.active.pop(name, None)
            state.active[name] = dict(tool)
        while len(state.active) > self.max_active:
            state.active.popitem(last=False)
        return dict(state.active) != before

    def remember_search(self, state: SessionState, names: Iterable[str], search_id: str) -> None:
        """Which search found each tool, so that a later call is credited to it."""
        for name in names:
            state.search_ids.pop(name, None)
            state.search_ids[name] = search_id
        while len(state.search_ids) > 4 * self.max_active:
            state.search_ids.popitem(last=False)
