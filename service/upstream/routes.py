"""Upstream MCP servers: GET/POST/DELETE /servers and POST /servers/{id}/refresh."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from service.catalog.lookup import server_not_found
from service.deps import CallerDep, GatewayDep, ResourcesDep, ServersAdminDep
from service.errors import InvalidRequest, body_pointer
from service.policy.callers import Caller
from service.policy.service import policy_state, visible_names
from service.security.json_body import StrictJsonBodyRoute
from service.upstream.config import parse_server_entry, server_entries
from service.upstream.registration import check_api_server
from service.upstream.service import add_server, delete_server, get_server, list_servers, refresh_server

router = APIRouter(tags=["servers"], route_class=StrictJsonBodyRoute)


class ServerCreateRequest(BaseModel):
    """One server, as an `mcpServers` entry with its id, or a whole `{"mcpServers": {...}}` with one entry."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str | None = Field(default=None, description="Server id (prefix of its tools' qualified names)")
    command: str | None = Field(default=None, description="stdio: the executable")
    args: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = Field(default=None, description="streamable HTTP: the endpoint URL")
    headers: dict[str, str] | None = None
    type: str | None = Field(default=None, description="stdio | http (inferred when omitted)")
    timeout: float | None = Field(default=None, gt=0, description="Call timeout of this server, in seconds")
    mcp_servers: dict[str, Any] | None = Field(default=None, alias="mcpServers")


class ServersResponse(BaseModel):
    servers: list[dict[str, Any]]


def _entry(request: ServerCreateRequest) -> tuple[str, Any, str]:
    """The one server of the body: (its id, its entry, the JSON pointer of the entry)."""
    if request.mcp_servers is not None:
        entries = server_entries({"mcpServers": request.mcp_servers}, root="/body")
        if len(entries) != 1:
            raise InvalidRequest(
                "POST /servers takes one server at a time",
                errors=[{"pointer": body_pointer("mcpServers"), "reason": "exactly one server"}],
            )
        return entries[0]
    if not request.id:
        raise InvalidRequest("The server needs an id", errors=[{"pointer": body_pointer("id"), "reason": "missing"}])
    return request.id, request.model_dump(exclude_none=True, exclude={"id", "mcp_servers"}), body_pointer()


def _usable_servers(resources: Any, caller: Caller) -> tuple[set[str] | None, dict[str, int]]:
    """The servers a non-admin may use (None: every one) and how many of each server's tools it may use."""
    visible = visible_names(resources, caller)
    if visible is None:
        return None, {}
    servers = policy_state(resources).servers
    counts: dict[str, int] = {}
    for name in visible:
        if (server := servers.get(name)) is not None:
            counts[server] = counts.get(server, 0) + 1
    return set(counts), counts


def _limited_view(view: dict[str, Any], tools: int | None) -> dict[str, Any]:
    """What a non-admin sees of a server: no command, args, env, URL, pid or stderr."""
    return {
        "id": view["id"],
        "state": view["state"],
        "tools": view["tools"] if tools is None else tools,
        "last_sync_at": view["last_sync_at"],
    }


@router.get("/servers", response_model=ServersResponse)
async def get_servers(resources: ResourcesDep, caller: CallerDep, gateway: GatewayDep) -> dict[str, Any]:
    """Every server with its health (admins); other callers see the servers they may use, without details."""
    if caller.is_admin:
        return {"servers": await list_servers(resources, gateway.pool)}
    usable, counts = _usable_servers(resources, caller)
    views = await list_servers(resources, gateway.pool, only=None if usable is None else frozenset(usable))
    return {
        "servers": [
            _limited_view(v, counts.get(v["id"]) if usable is not None else None)
            for v in views
            if usable is None or v["id"] in usable
        ]
    }


@router.get("/servers/{server_id}")
async def get_one_server(
    server_id: str, resources: ResourcesDep, caller: CallerDep, gateway: GatewayDep
) -> dict[str, Any]:
    """One server with its health; a server the caller may not use is answered like a missing one."""
    if caller.is_admin:
        return await get_server(resources, gateway.pool, server_id)
    usable, counts = _usable_servers(resources, caller)
    seen = None if usable is None else frozenset(usable)
    if seen is not None and server_id not in seen:
        raise server_not_found(server_id, seen)  # a server it may not use reads like a missing one
    view = await get_server(resources, gateway.pool, server_id, counted=seen is None, seen=seen)
    return _limited_view(view, counts.get(server_id) if usable is not None else None)


@router.post("/servers", status_code=201)
async def create_server(
    request: ServerCreateRequest, resources: ResourcesDep, gateway: GatewayDep, caller: ServersAdminDep
) -> dict[str, Any]:
    """Connect a new upstream server and index its tools (admin). 502 when it cannot be reached."""
    settings = resources.settings.execution
    server_id, entry, where = _entry(request)
    spec = parse_server_entry(server_id, entry, source="api", where=where)
    await check_api_server(spec, settings, where=where)
    return await add_server(resources, gateway.pool, spec, settings.startup_wait_seconds)


@router.delete("/servers/{server_id}")
async def remove_one_server(
    server_id: str, resources: ResourcesDep, gateway: GatewayDep, caller: ServersAdminDep
) -> dict[str, Any]:
    """Stop a server and remove it and its tools from the catalog (admin)."""
    return await delete_server(resources, gateway.pool, server_id, gateway.executor.tools.invalidate_server)


@router.post("/servers/{server_id}/refresh")
async def refresh_one_server(
    server_id: str, resources: ResourcesDep, gateway: GatewayDep, caller: ServersAdminDep
) -> dict[str, Any]:
    """List the server's tools again and sync the catalog: new and changed tools indexed, gone ones out."""
    return await refresh_server(resources, gateway.pool, server_id, resources.settings.execution.timeout_seconds)
