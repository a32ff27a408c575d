"""Pooled, long-lived MCP client sessions to upstream servers.

One `UpstreamConnection` per server owns one session (stdio child or streamable HTTP) in a supervisor task:
connect, list every tool (all pages), hand them to the catalog, then serve calls multiplexed on that session
until it is lost. A lost session (the child exits, the stream closes, a malformed result, no answer to a
ping) is reconnected with exponential backoff; `notifications/tools/list_changed` re-lists and re-syncs.
Upstream failures are translated here into the service's errors: UpstreamTimeout (504) and UpstreamError
(502).

Sessions use the initialize handshake (protocol 2025-11-25 and earlier), which every server speaks and in
which `tools/list_changed` is a plain notification on the session."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from service.db.models import utcnow
from service.errors import UpstreamError, UpstreamTimeout, counted
from service.upstream.calls import ToolCalls, leave_results_to_the_executor, output_schemas_of, task_only_tools
from service.upstream.checked_http import checked_http_client
from service.upstream.children import ChildRegistry
from service.upstream.config import ServerSpec
from service.upstream.egress import EgressProxy
from service.upstream.health import Backoff, ServerHealth, describe, exit_reason, sync_problems
from service.upstream.transport import DEFAULT_MAX_MESSAGE_BYTES, ChildProcess, http_transport, stdio_transport

logger = logging.getLogger(__name__)

CLIENT_INFO = types.Implementation(name="toolscout", version="0.1.0")
# Bounds the handshake, tools/list and pings; tool calls carry their own timeout.
SESSION_TIMEOUT_SECONDS = 30.0
PING_TIMEOUT_SECONDS = 10.0
MAX_TOOL_PAGES = 1000
STABLE_AFTER_SECONDS = 10.0
LIST_CHANGED_DEBOUNCE_SECONDS = 0.05
# Re-listings after list_changed start at most once a second, and pause 9 times as long as the last one took.
LIST_CHANGED_MIN_INTERVAL_SECONDS = 1.0
LIST_CHANGED_PAUSE_FACTOR = 9.0

ToolsCallback = Callable[[ServerSpec, list[dict[str, Any]]], Awaitable[Any]]
PrepareCallback = Callable[[ServerSpec], Awaitable[ServerSpec]]


class UpstreamConnection(ToolCalls):
    """One long-lived session to one server, kept alive by a supervisor task (tool calls: upstream/calls.py)."""

    def __init__(
        self,
        spec: ServerSpec,
        *,
        on_tools: ToolsCallback,
        prepare: PrepareCallback | None = None,
        backoff: Backoff | None = None,
        heartbeat_seconds: float = 30.0,
        children: ChildRegistry | None = None,
        allowed_hosts: Sequence[str] = (),
        egress: EgressProxy | None = None,
        max_message_bytes: int | None = None,
        max_tools_list_bytes: int | None = None,
        max_tools: int | None = None,
    ) -> None:
        self.spec = spec
        self._max_message_bytes = max_message_bytes  # execution.max_message_bytes
        self._max_tools_list_bytes = max_tools_list_bytes  # execution.max_tools_list_bytes
        self._max_tools = max_tools  # execution.max_tools_per_server
        self._allowed_hosts = allowed_hosts  # execution.upstream_allowed_hosts, for servers added over the API
        self._children_registry = children
        self._egress = egress  # the pool's egress proxy, for a spec with egress_proxy
        self.health = ServerHealth()
        self.server_info: dict[str, Any] = {}  # initialize's serverInfo and instructions (server-aware scoring)
        self.last_report: dict[str, Any] | None = None
        self.output_schemas = {}
        self._on_tools = on_tools
        self._prepare = prepare
        self._backoff = backoff or Backoff()
        self._heartbeat_seconds = heartbeat_seconds
        self._resolved: ServerSpec | None = None
        self._client: Client | None = None
        self._child = ChildProcess()
        self._ready = asyncio.Event()
        self._first_attempt = asyncio.Event()
        self._lost = asyncio.Event()
        self._lost_reason: str | None = None
        self._resync = asyncio.Event()
        self._wake = asyncio.Event()
        self._sync_lock = asyncio.Lock()
        self._stopping = False
        self._session_ready = False
        self._task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._client is not None

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the supervisor task."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"upstream:{self.id}")

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """End the session (the child is asked to exit, then killed) and the supervisor."""
        self._stopping = True
        self._mark_lost("stopped")
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=grace_seconds)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def wait_started(self, wait_seconds: float) -> bool:
        """Wait for the first connection attempt to end (ready and synced, or failed)."""
        with anyio.move_on_after(wait_seconds):
            await self._first_attempt.wait()
        return self.ready

    async def wait_ready(self, wait_seconds: float) -> bool:
        """Wait until the session is ready to take calls."""
        with anyio.move_on_after(wait_seconds):
            await self._ready.wait()
        return self.ready

    def restart(self, reason: str) -> None:
        """Drop the current session; the supervisor reconnects."""
        self._mark_lost(reason)

    def _mark_lost(self, reason: str) -> None:
        if not self._lost.is_set():
            self._lost_reason = reason
            self._lost.set()
        self._ready.clear()

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping:
            started = time.monotonic()
            error: str | None = None
            self._session_ready = False
            try:
                await self._run_session()
            except Exception as exc:  # noqa: BLE001 - any failure of a session: reconnect after a pause
                error = describe(exc)
            finally:
                self._ready.clear()
                self._client = None
                self.health.pid = None
            if self._stopping:
                break
            if error and self._lost_reason and self._lost_reason not in error:
                error = f"{error}: {self._lost_reason}"  # e.g. the read stream closed on an oversized message
            error = error or self._lost_reason or "the session ended"
            if self.spec.transport == "stdio" and self._child.returncode is not None:
                if "exited with code" not in error:
                    error = f"{error}; {exit_reason(self._child.returncode)}"
                if tail := self._child.stderr_tail():
                    error = f"{error}; stderr: {tail}"
            self.health.error(error)
            failures = 1 if self._session_ready and time.monotonic() - started >= STABLE_AFTER_SECONDS else failures + 1
            delay = self._backoff.delay(failures)
            self.health.state, self.health.next_attempt_in = "backoff", round(delay, 3)
            self._first_attempt.set()
            logger.warning("MCP server %s: %s; reconnecting in %.1f s", self.id, error, delay)
            with anyio.move_on_after(delay):
                await self._wake.wait()
            self._wake.clear()
            self.health.next_attempt_in = None
            self.health.restarts += 1
        self.health.state = "stopped"
        self._first_attempt.set()

    async def _proxy_env(self, spec: ServerSpec) -> dict[str, str]:
        """The egress proxy's variables for a server behind it; they override the spec's own."""
        if not spec.egress_proxy or spec.transport != "stdio":
            return {}
        if self._egress is None:
            raise UpstreamError(f"MCP server {self.id} must run behind the egress proxy and none is running")
        return await self._egress.environment(self.id, spec.env)

    def _transport(self, spec: ServerSpec, proxy_env: dict[str, str]) -> AbstractAsyncContextManager[Any]:
        if spec.transport == "http":
            assert spec.url is not None
            if spec.source == "api":  # untrusted: each connection goes only to an address checked at that moment
                http = checked_http_client(spec.headers, self._allowed_hosts, self.id)
            else:
                http = create_mcp_http_client(headers=spec.headers or None)
            return http_transport(spec.url, http, self._max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES)
        assert spec.command is not None
        self._child = ChildProcess()
        return stdio_transport(
            spec.command,
            list(spec.args),
            spec.env | proxy_env,
            spec.cwd,
            self._child,
            self._mark_lost,
            self.id,
            self._children_registry,
            self._max_message_bytes,
            hidden=self._egress.secrets(self.id) if self._egress is not None else (),
        )

    async def _run_session(self) -> None:
        """One session, from connect to loss."""
        if self._resolved is None:
            self.health.state = "installing" if self.spec.demo else "starting"
            prepared = await self._prepare(self.spec) if self._prepare else self.spec
            self._resolved = prepared.expanded()
        self.health.state = "connecting"
        self._lost.clear()
        self._lost_reason = None
        proxy_env = await self._proxy_env(self._resolved)
        client = Client(
            self._transport(self._resolved, proxy_env),
            mode="legacy",
            read_timeout_seconds=SESSION_TIMEOUT_SECONDS,
            message_handler=self._on_message,
            logging_callback=self._on_log,
            client_info=CLIENT_INFO,
            cache=None,
        )
        async with client:
            leave_results_to_the_executor(client)
            self.health.pid = self._child.pid if self.spec.transport == "stdio" else None
            self.server_info = self.health.introduced(client.protocol_version, client.server_info, client.instructions)
            tools = await self._list_tools(client)
            self._client = client
            self.health.connected_at = utcnow()
            self.health.state = "ready"
            self._session_ready = True
            self._ready.set()
            await self._sync_tools(tools)
            self._first_attempt.set()
            logger.info("MCP server %s ready: %s (pid %s)", self.id, counted(len(tools), "tool"), self.health.pid)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._resync_loop, client)
                if self._heartbeat_seconds > 0:
                    tg.start_soon(self._heartbeat, client)
                await self._lost.wait()
                self._ready.clear()
                tg.cancel_scope.cancel()

    # ---------------------------------------------------------------------------------- the catalog

    async def _list_tools(self, client: Client) -> list[dict[str, Any]]:
        """Every tool the server lists, following pagination (a repeated cursor ends the walk); past
        `max_tools_list_bytes` of tools (their JSON) and cursors in all, or past `max_tools` tools, an UpstreamError:
        each page is bounded by the transport, but the walk kept every page of up to MAX_TOOL_PAGES, and a sync takes
        ~50 KB of memory a tool at its peak however small the tool (a million tools of 60 bytes fit in 64 MB). The
        cursors seen are kept as digests: pages of one tool and a 10 MB cursor each held 10 MB a page."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[bytes] = set()
        size, limit = 0, self._max_tools_list_bytes
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            if self._max_tools is not None and len(tools) + len(page.tools) > self._max_tools:
                raise UpstreamError(
                    f"MCP server {self.id!r} lists more than {counted(self._max_tools, 'tool')} "
                    "(execution.max_tools_per_server)",
                    server=self.id,
                )
            cursor = page.next_cursor
            if limit is not None:
                size += len(cursor or "")  # a cursor is sent back: 10 MB ones page after page count too
                size += sum(len(tool.model_dump_json(by_alias=True, exclude_none=True)) for tool in page.tools)
                if size > limit:
                    raise UpstreamError(
                        f"MCP server {self.id!r} lists more than {limit} bytes of tools "
                        "(execution.max_tools_list_bytes)",
                        server=self.id,
                    )
            tools.extend(tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in page.tools)
            digest = hashlib.sha256((cursor or "").encode("utf-8", "surrogatepass")).digest()
            if not cursor or digest in seen:
                break
            seen.add(digest)
        self.output_schemas = output_schemas_of(tools)
        self.task_only = task_only_tools(tools)
        return tools

    async def _sync_tools(self, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        async with self._sync_lock:
            try:
                report = await self._on_tools(self.spec, tools)
            except Exception as exc:  # noqa: BLE001 - a failed sync must not take the connection down
                synced = counted(len(tools), "tool")
                logger.exception("MCP server %s: syncing %s into the catalog failed", self.id, synced)
                self.health.error(f"catalog sync failed: {describe(exc)}")
                return None
            if problems := sync_problems(report):
                message = "; ".join(problems)
                logger.warning("MCP server %s: %s", self.id, message)
                self.health.error(message)
            self.health.tools = len(tools)
            self.health.syncs += 1
            self.health.last_sync_at = utcnow()
            self.last_report = report.as_dict() if hasattr(report, "as_dict") else report
            return self.last_report

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.health.error(f"transport: {describe(message)}")
            logger.warning("MCP server %s: transport error: %s", self.id, describe(message))
        elif isinstance(message, types.ToolListChangedNotification):
            logger.info("MCP server %s: tools/list_changed", self.id)
            self.health.list_changed += 1
            self._resync.set()

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        logger.debug("MCP server %s [%s] %s", self.id, params.level, params.data)

    async def _resync_loop(self, client: Client) -> None:
        while True:
            await self._resync.wait()
            await anyio.sleep(LIST_CHANGED_DEBOUNCE_SECONDS)
            self._resync.clear()
            started = time.monotonic()
            try:
                tools = await self._list_tools(client)
            except MCPError as exc:
                self.health.error(f"tools/list after list_changed failed: {describe(exc)}")
                if exc.code == CONNECTION_CLOSED:
                    self._mark_lost("the connection closed")
                continue
            await self._sync_tools(tools)
            # A server announcing changes without end (every 10 ms: 10 syncs a second, each re-embedding what
            # changed) is listed again once the pause is over; what it announced meanwhile waits in _resync.
            spent = time.monotonic() - started
            await anyio.sleep(max(LIST_CHANGED_MIN_INTERVAL_SECONDS - spent, LIST_CHANGED_PAUSE_FACTOR * spent))

    async def _heartbeat(self, client: Client) -> None:
        while True:
            await anyio.sleep(self._heartbeat_seconds)
            if self.health.in_flight:
                continue
            try:
                await client.session.send_request(
                    types.PingRequest(), types.EmptyResult, request_read_timeout_seconds=PING_TIMEOUT_SECONDS
                )
            except MCPError as exc:
                if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT) and not self.health.in_flight:
                    self._mark_lost(f"ping failed: {describe(exc)}")

    async def refresh(self, wait_seconds: float) -> dict[str, Any] | None:
        """List the tools again and sync the catalog; a server in backoff is reconnected at once."""
        if not self.ready:
            self._wake.set()
            if not await self.wait_ready(wait_seconds):
                raise self._not_connected()
        client = self._client
        assert client is not None
        try:
            with anyio.fail_after(wait_seconds):
                tools = await self._list_tools(client)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"MCP server {self.id!r} did not list its tools within {wait_seconds:g} s", server=self.id
            ) from exc
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._mark_lost("the connection closed")
            raise UpstreamError(
                f"MCP server {self.id!r} failed to list its tools: {describe(exc)}", server=self.id
            ) from exc
        return await self._sync_tools(tools)
