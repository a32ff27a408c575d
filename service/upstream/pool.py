"""Every upstream connection of the service, by server id."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from service.errors import Conflict, NotFound
from service.upstream.children import ChildRegistry
from service.upstream.config import ServerSpec
from service.upstream.connection import PrepareCallback, ToolsCallback, UpstreamConnection
from service.upstream.egress import EgressProxy
from service.upstream.health import Backoff

LIVE_TRANSPORTS = ("stdio", "http")  # a server with one runs; a `catalog` one is only a registration of tools


def state_without_connection(runnable: bool) -> str:
    """The state of a server with no connection on this replica, as GET /servers and search results say it:
    `stopped` for a server with a transport to run (its stored configuration is not valid, or another replica added
    it and it has not started here yet), `catalog` for a catalog-only registration (nothing to run)."""
    return "stopped" if runnable else "catalog"


class UpstreamPool:
    """Every upstream connection of the service, by server id."""

    def __init__(
        self,
        *,
        on_tools: ToolsCallback,
        prepare: PrepareCallback | None = None,
        backoff: Backoff | None = None,
        heartbeat_seconds: float = 30.0,
        children: ChildRegistry | None = None,
        allowed_hosts: Sequence[str] = (),
        egress_allowed_hosts: Sequence[str] = (),
        max_message_bytes: int | None = None,
        max_tools_list_bytes: int | None = None,
        max_tools_per_server: int | None = None,
    ) -> None:
        self.children = children
        self._max_message_bytes = max_message_bytes
        self._max_tools_list_bytes = max_tools_list_bytes
        self._max_tools_per_server = max_tools_per_server
        self._allowed_hosts = allowed_hosts
        self.egress = EgressProxy(egress_allowed_hosts)  # listens once a server behind it starts
        self._on_tools = on_tools
        self._prepare = prepare
        self._backoff = backoff or Backoff()
        self._heartbeat_seconds = heartbeat_seconds
        self._connections: dict[str, UpstreamConnection] = {}
        self.adding: set[str] = set()  # servers being added over the API on this replica (upstream.service)
        # Servers the catalog holds with a live transport, connected here or not: a search tells the state of one
        # without a connection from it, with no I/O. Kept where the catalog's servers are synced with the pool.
        self.runnable: set[str] = set()

    def __contains__(self, server_id: str) -> bool:
        return server_id in self._connections

    def get(self, server_id: str) -> UpstreamConnection | None:
        return self._connections.get(server_id)

    def state_without_connection(self, server_id: str) -> str:
        return state_without_connection(server_id in self.runnable)

    def require(self, server_id: str) -> UpstreamConnection:
        connection = self._connections.get(server_id)
        if connection is None:
            raise NotFound(f"No upstream MCP server named {server_id!r}", server=server_id)
        return connection

    def connections(self) -> list[UpstreamConnection]:
        return sorted(self._connections.values(), key=lambda c: c.id)

    def add(self, spec: ServerSpec) -> UpstreamConnection:
        """Start a connection to a new server."""
        if spec.id in self._connections:
            raise Conflict(f"An upstream MCP server named {spec.id!r} already exists", server=spec.id)
        connection = UpstreamConnection(
            spec,
            on_tools=self._on_tools,
            prepare=self._prepare,
            backoff=self._backoff,
            heartbeat_seconds=self._heartbeat_seconds,
            children=self.children,
            allowed_hosts=self._allowed_hosts,
            egress=self.egress,
            max_message_bytes=self._max_message_bytes,
            max_tools_list_bytes=self._max_tools_list_bytes,
            max_tools=self._max_tools_per_server,
        )
        self._connections[spec.id] = connection
        self.runnable.add(spec.id)
        connection.start()
        return connection

    async def remove(self, server_id: str) -> None:
        """Stop a server's connection (if it has one here) and forget it."""
        connection = self._connections.pop(server_id, None)
        self.runnable.discard(server_id)
        if connection is not None:
            await connection.stop()
        self.egress.forget(server_id)

    async def wait_started(self, wait_seconds: float) -> None:
        """Wait (up to wait_seconds) for every connection's first attempt."""
        connections = list(self._connections.values())
        if connections:
            await asyncio.gather(*(c.wait_started(wait_seconds) for c in connections))

    async def close(self) -> None:
        """Stop every connection."""
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.stop() for c in connections), return_exceptions=True)
        await self.egress.aclose()
