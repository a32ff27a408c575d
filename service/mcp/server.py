"""The MCP front end: one MCP server in front of every tool of every upstream server, over the REST API.

    lazy     status, search_tools, call_tool, fetch_result: a constant tools/list whatever the catalog size
    grouped  lazy plus one help_<server>(query) per upstream server
    full     every tool as <server>__<tool> with its schema
    dynamic  the meta-tools, plus what this session's searches found (bounded, forgotten when idle)

In every mode the meta-tools and every catalog tool stay callable by exact name, a profile bounds what can be
searched and called, and an error is a tool result with `isError`. Built on the low-level SDK `Server` because
the tool list depends on the session.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import httpx
import mcp.types as types
from mcp.server import Server
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from indexer.tools import normalize_server_id
from service.errors import PermissionDenied, ToolscoutError
from service.mcp import MODES, Mode, render
from service.mcp.api import ApiError, ToolscoutApi
from service.mcp.arguments import call_arguments, fetch_arguments, help_query, run_arguments, search_arguments
from service.mcp.catalog import CatalogView
from service.mcp.notify import Notifier
from service.mcp.profiles import Profile
from service.mcp.render import CALL, FETCH, HELP_PREFIX, RUN, SEARCH, STATUS
from service.mcp.sessions import SessionStore
from service.mcp.shared_sessions import shared_sessions
from service.settings import Settings

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "http", "memory"]
STDIO_SESSION = "stdio"
_STATE_KEY = "toolscout.session"

INSTRUCTIONS = {
    "lazy": "Toolscout reaches every tool of many MCP servers. Use search_tools to find tools for a task, "
    "then call_tool with the exact name and arguments.",
    "grouped": "Toolscout reaches every tool of many MCP servers. Use search_tools, or help_<server> for one "
    "server, then call_tool with the exact name and arguments.",
    "full": "Toolscout lists every tool of its MCP servers as <server>__<tool>.",
    "dynamic": "Toolscout reaches every tool of many MCP servers. search_tools adds the tools it finds to "
    "your tool list; call them directly or with call_tool.",
}


class _FrontendServer(Server[Any]):
    """The SDK server, announcing `tools.listChanged` on every transport (HTTP sessions build their own
    initialization options)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection | None:
    # mcp 2.3 hands low-level handlers no public Connection (the SDK's Context.connection is not built by
    # ServerRunner yet, as the SDK notes at line 54 of its runner); the per-request ServerSession holds it.
    connection = getattr(ctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


class Frontend:
    """One front end process: its REST client, caches, sessions and the MCP server built for its mode."""

    def __init__(
        self,
        settings: Settings,
        *,
        mode: Mode = "lazy",
        profile: Profile | None = None,
        transport: Transport = "stdio",
        api_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        frontend = settings.frontend
        self.settings = settings
        self.mode: Mode = mode
        self.profile = profile
        # Not under a profile: a script's calls are bounded by the caller's permissions, not the profile's.
        self.run_script = frontend.run_script and profile is None
        self.single_session = transport == "stdio"
        # Whose tools this front end shows: its API and key (the permissions) and its profile (the scope). Part of
        # every shared session key, so a front end on another key or profile never reads these activations.
        self.scope = hashlib.sha256(
            f"{frontend.api_url}\n{frontend.api_key or ''}\n{profile.name if profile else ''}".encode()
        ).hexdigest()
        self.sessions = SessionStore(
            frontend.dynamic_max_sessions, frontend.dynamic_max_active, frontend.dynamic_idle_seconds
        )
        self.notifier = Notifier(frontend.http_max_sessions_per_client, frontend.http_max_sessions)
        self._api_transport = api_transport
        self._api: ToolscoutApi | None = None
        self.view = CatalogView(lambda: self.api, profile)
        self.server = _FrontendServer(
            "toolscout",
            version="0.1.0",
            title=f"Toolscout ({mode})",
            instructions=INSTRUCTIONS[mode],
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
            on_subscriptions_listen=self._on_listen,
        )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._on_initialized
        )

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        # For the SDK's Mcp-Param header check of 2026 HTTP calls: without it the SDK would list every tool
        # on each call. Unknown or uncached tools skip that check; the API validates arguments anyway.
        for tool in [*render.meta_tools(self.mode, max_k=self.settings.search.max_k), render.run_script_tool()]:
            if tool.name == name:
                return tool.input_schema
        cached = self.view.cached(name)
        return render.lean_schema(cached.get("input_schema")) if cached is not None else None

    # ---- lifecycle ----------------------------------------------------------------------------------------

    @property
    def api(self) -> ToolscoutApi:
        if self._api is None:
            raise RuntimeError("the front end is not running: enter `async with frontend.running()` first")
        return self._api

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Frontend]:
        """Open the REST client and follow the API's events for as long as the front end serves."""
        frontend = self.settings.frontend
        self._api = ToolscoutApi(
            frontend.api_url,
            frontend.api_key,
            timeout=frontend.request_timeout_seconds,
            transport=self._api_transport,
        )
        self.sessions.shared = shared_sessions(self.settings)
        try:
            async with anyio.create_task_group() as tg:
                retry = self.settings.frontend.events_retry_seconds
                tg.start_soon(self.view.follow_events, self._catalog_changed, retry)
                try:
                    yield self
                finally:
                    self.notifier.close()
                    tg.cancel_scope.cancel()
        finally:
            await self._api.aclose()
            self._api = None
            await self.sessions.detach()

    @property
    def events_connected(self) -> bool:
        """Whether the front end follows the API's events (and so may cache the catalog)."""
        return self.view.events_connected

    async def catalog(self) -> list[dict[str, Any]]:
        """Every tool in scope (REST shape)."""
        return await self.view.tools()

    async def _catalog_changed(self, server: str | None) -> None:
        """An upstream server's tools changed: refresh what sessions activated, then tell every client."""
        if server is not None and self.profile is not None and not self.profile.may_concern(server):
            return  # outside the profile: a notification alone would tell its clients of that part of the catalog
        if self.mode == "dynamic":
            await self._refresh_active(server)
        await self.notifier.tools_changed(None)

    async def _refresh_active(self, server: str | None) -> None:
        states = [s for s in self.sessions.states() if s.active]
        if not states:
            return
        try:
            current = {t["name"]: t for t in await self.api.list_tools(server=server)}
        except ApiError as exc:
            logger.warning("could not refresh activated tools after a catalog change: %s", exc.detail)
            return
        for key in [s.key for s in states]:  # read again: another front end may have changed a shared one
            state = await self.sessions.load(key)
            if state is not None and self.sessions.refresh_tools(state, server, current):
                await self.sessions.save(state)

    # ---- sessions -----------------------------------------------------------------------------------------

    def session_key(self, ctx: ServerRequestContext[Any, Any]) -> str:
        """The session a request belongs to, always from the transport (stdio: the process; 2025 era: the
        connection; 2026 era: the `Mcp-Session-Id` header, else the credential and client name). A client's
        `_meta` never names it: one client could otherwise take over another's activations."""
        connection = _connection_of(ctx)
        if connection is not None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            key = connection.state.get(_STATE_KEY)
            if key is None:
                if self.single_session:
                    key = STDIO_SESSION
                else:
                    key = f"http:{connection.session_id}" if connection.session_id else f"conn:{uuid.uuid4().hex}"
                    connection.exit_stack.callback(self.sessions.drop, key)
                connection.state[_STATE_KEY] = key
                self.notifier.register(key, connection)
            return str(key)
        if self.single_session:
            return STDIO_SESSION
        headers = getattr(ctx.request, "headers", None)
        credential = headers.get("authorization", "") if headers is not None else ""
        transport_session = headers.get("mcp-session-id", "") if headers is not None else ""
        params = ctx.session.client_params
        client = params.client_info.name if params is not None else ""
        # The credential is part of every key, so a guessed session id never reaches another caller's set; the
        # front end's scope too, so front ends on other API keys (other permissions) sharing Redis never meet.
        identity = f"{self.scope}\n{credential}\n{transport_session}\n{client}"
        return "caller:" + hashlib.sha256(identity.encode()).hexdigest()[:24]

    def _origin(self, ctx: ServerRequestContext[Any, Any]) -> tuple[Connection, ServerRequestContext[Any, Any]] | None:
        connection = _connection_of(ctx)
        return (connection, ctx) if connection is not None else None

    async def _on_initialized(self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams) -> None:
        self.session_key(ctx)  # registers the connection for list_changed before its first request

    async def _on_listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        return await self.notifier.listen(self.session_key(ctx), ctx, params)

    # ---- tools/list ---------------------------------------------------------------------------------------

    async def list_tools_for(self, session: str) -> list[types.Tool]:
        """The tool list a session sees in this mode."""
        catalog = await self.catalog() if self.mode in ("full", "grouped") else []
        if self.mode == "grouped" and self.profile is not None:  # no help_<server> of a server outside the profile
            catalog = [t for t in catalog if self.profile.allows_server(str(t["server"]))]
        state = await self.sessions.load(session) if self.mode == "dynamic" else None
        return render.mode_tools(
            self.mode,
            catalog=catalog,
            always=await self.view.always_listed() if self.mode != "full" else [],
            # In scope again: a shared state is read from Redis, which may hold what this profile never activated.
            active=[t for t in state.active.values() if self.view.in_scope(t)] if state is not None else [],
            default_k=self.profile.default_k if self.profile else None,
            max_k=self.settings.search.max_k,
            run_script=self.run_script,
        )

    async def _on_list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = self.session_key(ctx)
        if self.mode == "dynamic":
            await self.sessions.open(session)  # listing counts as activity
        try:
            tools = await self.list_tools_for(session)
        except ApiError as exc:
            # A client cannot act on a failed list; fall back to the meta-tools so status can explain.
            logger.warning("tools/list fell back to the meta-tools: %s", exc.detail)
            tools = render.meta_tools(self.mode, max_k=self.settings.search.max_k)
        return types.ListToolsResult(tools=tools, ttl_ms=0, cache_scope="private")

    # ---- tools/call ---------------------------------------------------------------------------------------

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        try:
            return await self._dispatch(ctx, params.name, arguments)
        except ToolscoutError as exc:
            return render.error_result(exc)
        except Exception as exc:  # the session boundary: a bug in one call must not end the client's session
            logger.exception("front end call of %s failed", params.name)
            return render.error_result(ToolscoutError(f"The Toolscout front end failed: {type(exc).__name__}: {exc}"))

    async def _dispatch(
        self, ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        if name == STATUS:
            return await self._status(ctx)
        if name == SEARCH:
            query, k, server = search_arguments(arguments, self.settings.search.max_k)
            return await self._search(ctx, query, k, server)
        if name == CALL:
            return await self._call(ctx, *call_arguments(arguments))
        if name == RUN and self.run_script:
            return render.run_result(await self.api.run(*run_arguments(arguments)))
        if name == FETCH:
            return _text(render.fetch_result_text(await self.api.fetch_result(*fetch_arguments(arguments))))
        if self.mode == "grouped" and name.startswith(HELP_PREFIX):
            server = await self._help_server(name)
            if server is not None:
                return await self._search(ctx, help_query(arguments, name), None, server)
        return await self._call(ctx, name, arguments)

    async def _help_server(self, name: str) -> str | None:
        for tool in await self.catalog():
            if render.help_tool_name(str(tool["server"])) == name:
                return str(tool["server"])
        return None

    async def _status(self, ctx: ServerRequestContext[Any, Any]) -> types.CallToolResult:
        servers = await self.api.servers()
        if self.profile is not None:  # the tools in scope (tags, always_listed), not every tool of its servers
            scope = Counter(str(t["server"]) for t in await self.catalog())
            servers = [
                {**s, "tools": scope[s["id"]]} for s in servers if scope[s["id"]] or self.profile.allows_server(s["id"])
            ]
        state = await self.sessions.load(self.session_key(ctx))
        active = list(state.active) if state is not None else []
        return _text(render.status_text(self.mode, self.profile.name if self.profile else None, servers, active))

    async def _search(
        self, ctx: ServerRequestContext[Any, Any], query: str, k: int | None, server: str | None
    ) -> types.CallToolResult:
        profile = self.profile
        if server is not None:
            server = normalize_server_id(server)
            if profile is not None and not profile.allows_server(server):
                raise PermissionDenied(
                    f"Server {server!r} is outside the profile {profile.name!r}",
                    servers=list(profile.servers),
                )
        servers = [server] if server else (list(profile.servers) if profile and profile.servers else None)
        tags = list(profile.tags) if profile and profile.tags else None
        k = k or (profile.default_k if profile else None)
        body = await self.api.search(query, k=k, servers=servers, tags=tags)
        results = [r for r in body.get("results") or [] if self.view.in_scope(r)]
        session = self.session_key(ctx)
        state = await self.sessions.open(session)
        if body.get("search_id"):
            self.sessions.remember_search(state, [r["name"] for r in results], str(body["search_id"]))
        activated = self.mode == "dynamic" and self.sessions.activate(state, (_catalog_shape(r) for r in results))
        await self.sessions.save(state)
        if activated:
            await self.notifier.tools_changed(session, origin=self._origin(ctx))
        warned = [w for w in body.get("warnings") or [] if str(w.get("pointer")).startswith("/body/servers/")]
        notes = [str(w.get("reason")) for w in warned] if server else []
        return _text(render.search_text(results, self.mode, notes))

    async def _call(
        self,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        arguments: dict[str, Any],
        approval_id: str | None = None,
    ) -> types.CallToolResult:
        if self.profile is not None:
            name = str((await self.view.tool_in_scope(name))["name"])
        state = await self.sessions.load(self.session_key(ctx))
        search_id = state.search_ids.get(name) if state is not None else None
        return render.execution_result(await self.api.execute(name, arguments, search_id, approval_id))


def _catalog_shape(result: Mapping[str, Any]) -> dict[str, Any]:
    """A search hit without its score: the catalog entry a session activates."""
    return {k: v for k, v in result.items() if k not in ("score", "explain")}


def create_frontend(
    settings: Settings,
    *,
    mode: Mode = "lazy",
    profile: Profile | None = None,
    transport: Transport = "stdio",
    api_transport: httpx.AsyncBaseTransport | None = None,
) -> Frontend:
    """Build a front end (cheap: nothing connects until `running()`)."""
    return Frontend(settings, mode=mode, profile=profile, transport=transport, api_transport=api_transport)
