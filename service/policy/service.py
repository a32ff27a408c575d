"""Who may use what: the permission filter of searches and the authorisation of calls.

Two boundary functions: `permission_filter` (used inside every vector query, so a tool the caller may not
use is never a candidate) and `authorize_call` (used by /execute before anything runs). The permissions file
is reloaded when it changes; the caller's allowed names are computed from a snapshot of the catalog
(qualified name -> server) that is refreshed in the background and whenever the searchable names change."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, cast

from fastapi import Request
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.index.base import SearchFilter
from indexer.tools import SEPARATOR
from service.db.models import Tool, active
from service.errors import PermissionDenied, Unauthorized, counted
from service.policy.approvals import approval_required, arguments_digest, consume_approval, request_approval
from service.policy.callers import Caller
from service.policy.console_sessions import client_address, session_caller
from service.policy.keys import key_resolver, presented_key
from service.policy.permissions import PermissionSet, PermissionsFileError, Rules, load_permissions
from service.resources import Resources
from service.security.hosts import ANY_ORIGIN_MARK
from service.security.json_body import BODY_CHARGE, PARSE_TURN, before_body
from service.security.openmode import not_local, open_mode_allowed, refuse_unsafe_start

logger = logging.getLogger(__name__)

FILE_CHECK_SECONDS = 2.0
RESOLVED_CALLER = "toolscout.caller"  # the request scope's key for its resolved caller
CATALOG_REFRESH_SECONDS = 30.0


class PolicyState:
    """The permission set in force and the catalog snapshot the allowed-name sets are computed from."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.path = resources.settings.policy.permissions_file
        self._mtime = self._stat()
        self.permissions: PermissionSet = load_permissions(self.path)
        self._checked = time.monotonic()
        self.servers: dict[str, str] = {}  # active qualified name -> server id
        # Active qualified name -> the name its upstream listed, where the two differ beyond the server prefix (a
        # letter that is not ASCII became `_`): deny patterns read the listed one too.
        self.listed: dict[str, str] = {}
        self.catalog_at = 0.0
        self._allowed: dict[frozenset[str], frozenset[str]] = {}
        self._refresh_task: asyncio.Task[int] | None = None
        self.refresh_lock = asyncio.Lock()

    def _stat(self) -> float | None:
        try:
            return self.path.stat().st_mtime if self.path is not None else None
        except OSError:
            return None

    def current(self) -> PermissionSet:
        """The permission set, reloaded when the file changed (a broken edit keeps the previous set)."""
        now = time.monotonic()
        if self.path is not None and now - self._checked >= FILE_CHECK_SECONDS:
            self._checked = now
            mtime = self._stat()
            if mtime != self._mtime:
                self._mtime = mtime
                try:
                    self.permissions = load_permissions(self.path)
                    self._allowed.clear()
                    logger.info("permissions reloaded from %s", self.path)
                except PermissionsFileError as exc:
                    logger.error("permissions file change ignored, keeping the previous rules: %s", exc)
        return self.permissions

    def set_catalog(self, servers: dict[str, str], listed: dict[str, str] | None = None) -> None:
        self.servers = servers
        self.listed = listed or {}
        self.catalog_at = time.monotonic()
        self._allowed.clear()

    def allowed_names(self, roles: frozenset[str], rules: Rules) -> frozenset[str]:
        """The catalog names these roles may use (cached per role set until the catalog or file changes)."""
        names = self._allowed.get(roles)
        if names is None:
            listed = self.listed
            names = frozenset(q for q, server in self.servers.items() if rules.permits(q, server, listed.get(q)))
            self._allowed[roles] = names
        return names

    def unknown_names(self) -> list[str]:
        """Searchable names registered since the snapshot (their server is not known yet).

        A changed number of names, or an old snapshot, also schedules a refresh of the snapshot."""
        retriever = self.resources.retriever
        changed = self.stale()
        if changed or time.monotonic() - self.catalog_at > CATALOG_REFRESH_SECONDS:
            self.schedule_refresh()
        if not changed or retriever is None:
            return []
        return [name for name in retriever.directory.names() if name not in self.servers]

    def stale(self) -> bool:
        """The searchable names changed in number since the snapshot."""
        retriever = self.resources.retriever
        return retriever is not None and len(retriever.directory) != len(self.servers)

    def schedule_refresh(self) -> None:
        if self._refresh_task is not None and not self._refresh_task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._refresh_task = loop.create_task(refresh_catalog(self.resources))
        self._refresh_task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("refreshing the policy's catalog snapshot failed: %r", task.exception())


def policy_state(resources: Resources) -> PolicyState:
    """The app's policy state, created on first use."""
    if resources.policy is None:
        resources.policy = PolicyState(resources)
    return resources.policy


async def refresh_catalog(resources: Resources) -> int:
    """Reload the snapshot of active tool names and their servers; returns its size."""
    async with resources.session() as session:
        rows = (await session.execute(select(Tool.qualified_name, Tool.server_id, Tool.name).where(active()))).all()
    listed = {q: name for q, server, name in rows if q != f"{server}{SEPARATOR}{name}"}
    policy_state(resources).set_catalog({q: server for q, server, _ in rows}, listed)
    return len(rows)


async def ensure_fresh(resources: Resources) -> None:
    """Before a request: refresh the catalog snapshot if tools were added or removed since (restricted
    permissions only; without a permissions file nothing is filtered)."""
    state = policy_state(resources)
    if not state.permissions.restricted or not state.stale():
        return
    async with state.refresh_lock:
        if state.stale():
            await refresh_catalog(resources)


def caller_rules(resources: Resources, caller: Caller) -> Rules:
    """The union of the rules of the caller's roles."""
    return policy_state(resources).current().rules_for(caller.roles)


def may_use(resources: Resources, caller: Caller, qualified_name: str, server: str, name: str | None = None) -> bool:
    """May this caller use this tool? (`name`: as its upstream listed it)"""
    return caller_rules(resources, caller).permits(qualified_name, server, name)


def visible_names(resources: Resources, caller: Caller) -> frozenset[str] | None:
    """The names this caller may use, or None when it may use every tool."""
    return permission_filter(resources, caller, SearchFilter()).allowed


def usable_names(resources: Resources, caller: Caller) -> Sequence[str]:
    """The active tools this caller may use, in order, as search filters them: from the cached sets, never the
    catalog's rows (reading and checking each of them cost 0.35 s of the event loop on 100k tools)."""
    visible = visible_names(resources, caller)
    if visible is not None:
        return _in_order(visible)
    return resources.retriever.directory.names() if resources.retriever is not None else []


@functools.lru_cache(maxsize=16)
def _in_order(names: frozenset[str]) -> tuple[str, ...]:
    # Once per cached set: the policy hands out the same object until the catalog or the permissions change.
    return tuple(sorted(names))


def permission_filter(resources: Resources, caller: Caller, base: SearchFilter) -> SearchFilter:
    """The search filter of this caller: `base` (servers, tags) narrowed to the tools the caller may use.

    Restricted callers get an explicit allowed set, so a tool registered after the snapshot stays hidden
    from them until its server is known (fail closed) rather than slipping past a deny list."""
    state = policy_state(resources)
    rules = state.current().rules_for(caller.roles)
    if rules.unrestricted:
        return base
    allowed = state.allowed_names(caller.roles, rules)
    unknown = state.unknown_names()
    if unknown:
        # Without its server a new name can pass on tool patterns alone, and only if no server rule denies.
        if not any(p.kind == "server" for p in rules.deny):
            tool_only = Rules(tuple(p for p in rules.allow if p.kind == "tool"), rules.deny)
            directory = resources.retriever.directory if resources.retriever is not None else None
            extra = {name for name in unknown if tool_only.permits(name, "", directory and directory.listed_name(name))}
            if extra:
                allowed = allowed | extra
    if base.allowed is not None:
        allowed = allowed & base.allowed
    return replace(base, allowed=allowed)


async def authorize_call(
    resources: Resources,
    session: AsyncSession,
    caller: Caller,
    tool: Any,
    arguments: dict[str, Any],
    approval_id: str | None,
) -> None:
    """Raise PermissionDenied / ApprovalRequired when the caller may not make this call now.

    `tool` is the catalog row. A destructive tool needs an approval of exactly this call: without
    `approval_id` a pending request is created and returned in the 403; with it the approval is used up.
    (Rate limits are charged per request when the caller is resolved.)"""
    permissions = policy_state(resources).current()
    name, server = tool.qualified_name, tool.server_id
    if not permissions.permits(caller.roles, name, server, tool.name):
        raise PermissionDenied(f"Caller {caller.id!r} may not use the tool {name}", tool=name)
    if not permissions.needs_approval(name, server, tool.annotations, tool.name):
        return
    digest = arguments_digest(arguments)
    if approval_id is None:
        row = await request_approval(resources, caller, name, digest, arguments)
        raise approval_required(
            row,
            f"{name} is destructive: an approver must grant approval {row.id}, then repeat the call "
            "with this approval_id",
        )
    await consume_approval(resources, approval_id, caller, name, digest)


def is_approver(resources: Resources, caller: Caller) -> bool:
    """May this caller grant approvals?"""
    return caller.is_open or policy_state(resources).current().is_approver(caller.roles)


@before_body
async def resolve_caller(request: Request) -> Caller:
    """The caller of a request: its API key, else (under /console/api) its console session. With no API keys
    configured the service runs open for one local user. Resolved (and charged, its body too) once a request:
    before the body is read, then again as the routes' dependency."""
    caller = await _resolved_caller(request)
    await charge_body(request, caller)
    return caller


async def _resolved_caller(request: Request) -> Caller:
    """`resolve_caller` before its body is charged: a role check refuses a body it will never read for free."""
    if (resolved := request.scope.get(RESOLVED_CALLER)) is not None:
        return cast(Caller, resolved)
    resources = request.app.state.resources
    resolver = key_resolver(resources)
    key = presented_key(request)
    if key is None and (by_session := await session_caller(resources, request)) is not None:
        caller = await resolver.charge(by_session)
    else:
        caller = await resolver.resolve(key, client_address(request), request.headers.get("authorization"))
    if caller.is_open and (elsewhere := not_local(request.scope.get("headers", []), client_address(request))):
        # Open mode is for the user of this machine: a reverse proxy in front of the loopback address (sending
        # nginx's default Host, 127.0.0.1:8765, or its client's Host) made every client of the proxy this admin.
        raise Unauthorized(
            f"Without API keys the service answers this machine's own requests only, and {elsewhere}; "
            "create a key with `toolscout keys create` and send it"
        )
    if caller.is_open and request.scope.get(ANY_ORIGIN_MARK):
        # With `*` among the CORS origins any site's page could call the open admin and read its answers.
        raise Unauthorized(
            "Without API keys the service answers no page of an origin that only `*` in policy.cors_origins "
            "admits; list the origin by name, or create a key with `toolscout keys create` and send it"
        )
    request.state.caller = caller  # for the request's log line (observability reads it when the request ends)
    await ensure_fresh(resources)
    request.scope[RESOLVED_CALLER] = caller
    request.scope[PARSE_TURN] = caller.key_id or caller.id  # its long bodies take the parse thread in turn
    return caller


BODY_TOKENS = "toolscout.body_tokens"  # the request scope's key for the tokens its caller and body took


async def charge_body(request: Request, caller: Caller) -> None:
    """Charge the request's body by its size (once) before it is read: by Content-Length now, a chunked body once
    it has arrived (json_body.BODY_CHARGE). The tokens taken in all go in the scope (a batch caps its calls' by
    them)."""
    if BODY_TOKENS in request.scope:
        return
    request.scope[BODY_TOKENS] = 1
    resolver = key_resolver(request.app.state.resources)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit():
        request.scope[BODY_TOKENS] = await resolver.charge_body(caller, int(length))
    else:

        async def charge(size: int) -> None:
            request.scope[BODY_TOKENS] = await resolver.charge_body(caller, size)

        request.scope[BODY_CHARGE] = charge


def require_admin(action: str) -> Callable[[Request], Awaitable[Caller]]:
    """A route dependency: the caller, who must have the admin role for `action` ("Managing API keys"); checked
    before the body is read (a dev key's registration body was parsed before its 403)."""

    @before_body
    async def admin(request: Request) -> Caller:
        caller = await _resolved_caller(request)
        if not caller.is_admin:
            raise PermissionDenied(f"{action} needs the admin role", caller=caller.id)
        await charge_body(request, caller)
        return caller

    return admin


@before_body
async def require_approver(request: Request) -> Caller:
    """A route dependency: the caller, who must be allowed to grant approvals (checked before the body is read)."""
    caller = await _resolved_caller(request)
    if not is_approver(request.app.state.resources, caller):
        raise PermissionDenied("Granting approvals needs an approver role", caller=caller.id)
    await charge_body(request, caller)
    return caller


async def start_policy(resources: Resources) -> None:
    """Startup hook: load the permissions, snapshot the catalog, say whether the service runs open."""
    state = policy_state(resources)
    size = await refresh_catalog(resources)
    source = state.permissions.source or "none (every caller may use every tool)"
    logger.info("permissions: %s; %s in the policy snapshot", source, counted(size, "tool"))
    resolver = key_resolver(resources)
    keys_exist = await resolver.keys_exist()
    refuse_unsafe_start(resources.settings, keys_exist)
    if not keys_exist:
        if resources.keyless_by_design:
            logger.debug("No API key configured: serving one local user (admin), as this local bench does")
        elif open_mode_allowed(resources.settings):
            logger.warning(
                "No API key configured: serving one local user (admin) without authentication. "
                "Create a key with `toolscout keys create --caller NAME --role ROLE` to require keys."
            )
        else:
            logger.warning("No API key configured and open mode is off: every request will be refused")


async def stop_policy(resources: Resources) -> None:
    """Shutdown hook: cancel a snapshot refresh still running."""
    task = policy_state(resources)._refresh_task
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
