"""The catalog as one front end sees it: the tools of its profile, fetched from the API and cached only while
the API's event stream (GET /events) is followed, so a cached list is never older than the last change."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from indexer.closest import close_names
from service.errors import NotFound
from service.mcp.api import ApiError, ToolscoutApi
from service.mcp.profiles import Profile

logger = logging.getLogger(__name__)

MAX_EVENT_RETRY_SECONDS = 60.0

OnChange = Callable[[str | None], Awaitable[None]]


class CatalogView:
    """Catalog reads of a front end through the API, and the event stream that keeps their cache honest."""

    def __init__(self, api: Callable[[], ToolscoutApi], profile: Profile | None) -> None:
        self._api = api
        self.profile = profile
        self.events_connected = False
        # Bumped by every invalidation, so a fetch that raced a change does not store its stale answer.
        self._generation = 0
        self._catalog: list[dict[str, Any]] | None = None
        self._tools: dict[str, dict[str, Any]] = {}

    def in_scope(self, tool: Mapping[str, Any]) -> bool:
        """Whether the profile (if any) lets the front end show and call this tool."""
        return self.profile is None or self.profile.allows(tool)

    def invalidate(self) -> None:
        """Forget everything cached."""
        self._generation += 1
        self._catalog = None
        self._tools.clear()

    def _cacheable(self, generation: int) -> bool:
        return self.events_connected and generation == self._generation

    async def tools(self) -> list[dict[str, Any]]:
        """Every tool in scope (REST shape), sorted by name."""
        if self._catalog is not None:
            return self._catalog
        generation = self._generation
        listed = await self._api().list_tools()
        tools = sorted((t for t in listed if self.in_scope(t)), key=lambda t: str(t["name"]))
        if self._cacheable(generation):
            self._catalog = tools
            self._tools.update({t["name"]: t for t in tools})
        return tools

    async def tool(self, name: str) -> dict[str, Any]:
        """One catalog tool by name (REST shape); ApiError 404 when unknown."""
        cached = self._tools.get(name)
        if cached is not None:
            return cached
        generation = self._generation
        tool = await self._api().get_tool(name)
        if self._cacheable(generation):
            self._tools[name] = tool
        return tool

    async def tool_in_scope(self, name: str) -> dict[str, Any]:
        """A tool the profile lets this front end call. Any other name, whether a tool outside the profile or none
        at all, gets the same NotFound naming the closest tools in scope: the API's 404 would name any tool."""
        try:
            tool: dict[str, Any] | None = await self.tool(name)
        except ApiError as exc:
            if exc.status != 404:
                raise
            tool = None
        if tool is not None and self.in_scope(tool):
            return tool
        closest = close_names(name, {str(t["name"]): str(t.get("tool") or t["name"]) for t in await self.tools()})
        hint = f"; closest: {', '.join(closest)}" if closest else ""
        profile = self.profile.name if self.profile else ""
        raise NotFound(f"No tool named {name!r} in the profile {profile!r}{hint}", tool=name, closest=closest)

    def cached(self, name: str) -> dict[str, Any] | None:
        """A tool already in the cache, without asking the API."""
        return self._tools.get(name)

    async def always_listed(self) -> list[dict[str, Any]]:
        """The profile's always-listed tools that exist (a missing one is logged, not fatal)."""
        tools = []
        for name in self.profile.always_listed if self.profile else ():
            try:
                tools.append(await self.tool(name))
            except ApiError as exc:
                logger.warning(
                    "always-listed tool %s of profile %s is unavailable: %s",
                    name,
                    self.profile.name if self.profile else "",
                    exc.detail,
                )
        return tools

    async def follow_events(self, on_change: OnChange, retry_seconds: float) -> None:
        """Follow GET /events until cancelled: each `tools_changed` (and each reconnection, which may have
        missed some) drops the cache and calls `on_change(server or None)`. Reconnects with backoff."""
        delay = base = max(0.05, retry_seconds)
        had_stream = False
        while True:
            api = self._api()
            try:
                async for event, data in api.events():
                    if event == "open":
                        self.events_connected, delay = True, base
                        if had_stream:
                            self.invalidate()
                            await on_change(None)
                        had_stream = True
                    elif event == "tools_changed":
                        self.invalidate()
                        server = data.get("server")
                        await on_change(server if isinstance(server, str) else None)
            except ApiError as exc:
                log = logger.warning if delay == base else logger.debug
                log("no event stream from %s (%s); retrying in %.1f s", api.base_url, exc.detail, delay)
            self.events_connected = False
            self.invalidate()
            await anyio.sleep(delay)
            delay = min(delay * 2, MAX_EVENT_RETRY_SECONDS)
