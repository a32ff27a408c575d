"""Per-session state of the front end: the dynamic-mode activation set and the search that found each tool.

Bounded three ways: at most `max_active` activated tools per session (the least recently used leave first),
at most `max_sessions` sessions (the least recently seen leave first), and a session idle for `idle_seconds`
is forgotten. A forgotten session starts again from the meta-tools; its tools stay callable by name.

With a `shared` store (Redis, shared_sessions.py) the sessions a client carries between front-end instances
are read from it before use (`load`) and written back after each change (`save`); this store then holds
the copies of this instance.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from service.mcp.render import catalog_tool
from service.mcp.shared_sessions import SharedSessions, unreachable


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
        self.shared: SharedSessions | None = None  # set by the front end while it runs with Redis

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

    async def load(self, key: str) -> SessionState | None:
        """`peek`, after reading the session again from the shared store when it holds this session."""
        await self._read_shared(key, touch=False)
        return self.peek(key)

    async def open(self, key: str) -> SessionState:
        """`get` (created if needed, marked seen), after reading the session again from the shared store."""
        await self._read_shared(key, touch=True)
        return self.get(key)

    async def _read_shared(self, key: str, *, touch: bool) -> None:
        shared = self.shared
        if shared is None or not shared.shares(key):
            return
        stored = await shared.load(key)
        if unreachable(stored):
            return  # while Redis is away this instance's copy answers
        self._sessions.pop(key, None)
        if isinstance(stored, dict):
            self._adopt(key, stored)
            if touch:
                await shared.touch(key)

    def _adopt(self, key: str, stored: dict[str, Any]) -> None:
        """The stored state as far as it has the shape `save` writes: Redis may hold another version's states
        (a rolling upgrade) or anything its users wrote, and a bad entry must not fail the client's requests."""
        state = SessionState(key=key, last_seen=self._clock())
        state.active.update((name, tool) for name, tool in _pairs(stored.get("active")) if _lists(name, tool))
        state.search_ids.update(
            (name, search) for name, search in _pairs(stored.get("search_ids")) if isinstance(search, str)
        )
        while len(state.active) > self.max_active:
            state.active.popitem(last=False)
        self._sessions[key] = state

    async def detach(self) -> None:
        """Stop sharing (the front end stops): close the shared store's connection."""
        shared, self.shared = self.shared, None
        if shared is not None:
            await shared.aclose()

    async def save(self, state: SessionState) -> None:
        """Write a changed state to the shared store (no-op without one, or for a session of this instance)."""
        if self.shared is not None and self.shared.shares(state.key):
            await self.shared.save(state.key, state.active, state.search_ids)

    def refresh_tools(self, state: SessionState, server: str | None, current: Mapping[str, dict[str, Any]]) -> bool:
        """Set a session's activated tools of `server` (None: all) to the catalog's `current` entries, dropping
        the ones gone; True when it changed."""
        before = dict(state.active)
        for name, tool in list(state.active.items()):
            if server is not None and tool.get("server") != server:
                continue
            if name in current:
                state.active[name] = current[name]
            else:
                del state.active[name]
        return dict(state.active) != before

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


def _pairs(value: Any) -> list[tuple[str, Any]]:
    """The `[name, value]` pairs of a stored list whose name is a string (anything else is skipped)."""
    if not isinstance(value, list):
        return []
    return [
        (item[0], item[1]) for item in value if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
    ]


def _lists(name: str, tool: Any) -> bool:
    """Whether a stored activated tool is a catalog entry of that name that tools/list can show."""
    if not isinstance(tool, dict) or tool.get("name") != name:
        return False
    try:
        catalog_tool(tool)
    except (TypeError, ValueError, AttributeError):
        return False
    return True
