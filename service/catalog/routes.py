"""The catalog over HTTP: list, get, register (batch) and delete tools."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from service.catalog import lookup, removal
from service.catalog import service as catalog
from service.catalog.review import admin_view, approve_info, approve_tool, held_server_infos
from service.deps import CallerDep, ResourcesDep, SessionDep, ToolsAdminDep
from service.errors import InvalidTool, PayloadTooLarge, PermissionDenied, body_pointer, counted
from service.security.json_body import StrictJsonBodyRoute
from service.security.request_body import RequestBody

router = APIRouter(tags=["tools"], route_class=StrictJsonBodyRoute)


class ServerInfo(BaseModel):
    """An MCP server info block (`serverInfo` of initialize) with the server's `instructions`."""

    name: str | None = Field(default=None, max_length=256)
    title: str | None = Field(default=None, max_length=256)
    description: str | None = Field(default=None, max_length=4000)
    instructions: str | None = Field(default=None, max_length=20000)


class RegisterRequest(RequestBody):
    """A batch of tools; each names its server or takes the batch's `server`."""

    server: str | None = Field(default=None, description="Default server for tools that name none")
    tools: list[Any] = Field(description="Tool definitions: server, name, description, input_schema, annotations, tags")
    servers: dict[str, ServerInfo] | None = Field(
        default=None, description="What the batch's servers say about themselves (server name -> info), for ranking"
    )


class RegisterResponse(BaseModel):
    created: int
    updated: int
    unchanged: int
    removed: int
    tools: list[str]
    errors: list[dict[str, Any]]
    warnings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Keys of a tool that no tool has, ignored (the tool is kept): the first 20 of the batch",
    )
    more_warnings: int | None = Field(default=None, description="How many more such keys the batch has")
    held: list[dict[str, Any]] = Field(default_factory=list, description="Tools held for review: name and reason")


@router.get("/tools")
async def get_tools(
    session: SessionDep,
    resources: ResourcesDep,
    caller: CallerDep,
    server: str | None = None,
    tag: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
    held: bool = Query(False, description="Admins: the tools held for review instead, each with why (`held`)"),
) -> dict[str, Any]:
    """Active tools the caller may use, a page at a time; with `held=true` (admins), the tools held for review."""
    if held:
        if not caller.is_admin:
            raise PermissionDenied("Listing the tools held for review needs the admin role", caller=caller.id)
        rows, total = await lookup.list_tools(session, server=server, tag=tag, limit=limit, offset=offset, held=True)
        tools = [admin_view(r) for r in rows]
        servers = await held_server_infos(resources)  # changed server info held out of ranking, as tools are
        return {"tools": tools, "total": total, "limit": limit, "offset": offset, "held_servers": servers}
    rows, total = await lookup.list_visible_tools(
        session, resources, caller, server=server, tag=tag, limit=limit, offset=offset
    )
    return {"tools": [catalog.tool_view(r) for r in rows], "total": total, "limit": limit, "offset": offset}


@router.get("/tools/{name}")
async def get_tool(
    name: str,
    session: SessionDep,
    resources: ResourcesDep,
    caller: CallerDep,
    held: bool = Query(False, description="Admins: the tool even when held for review, with why (`held`)"),
) -> dict[str, Any]:
    """One tool by qualified name. A tool held for review is missing, except to an admin asking with `held=true`."""
    if held and caller.is_admin:
        return admin_view(await lookup.find_tool(session, name, resources, held=True))
    return catalog.tool_view(await lookup.find_visible_tool(session, resources, caller, name))


@router.post("/tools/{name}/approve")
async def approve(name: str, resources: ResourcesDep, caller: ToolsAdminDep) -> dict[str, Any]:
    """Release a tool held for review (admin): it is indexed, listed and callable again, and its definition is
    trusted (not held again for the same text). 404 for no such tool, 409 for a tool that is not held."""
    return await approve_tool(resources, name)


@router.post("/servers/{server_id}/info/approve")
async def approve_server_info(server_id: str, resources: ResourcesDep, caller: ToolsAdminDep) -> dict[str, Any]:
    """Take a server's changed info held for review (admin): its title, description and instructions rank its
    tools from now on. 404 for no such server, 409 for a server whose info is not held."""
    return await approve_info(resources, server_id)


@router.post("/tools", response_model=RegisterResponse, response_model_exclude_none=True)
async def register(request: RegisterRequest, resources: ResourcesDep, caller: ToolsAdminDep) -> dict[str, Any]:
    """Register or update a batch; bad tools are reported one by one and do not stop the others.

    When every tool of the batch is refused the answer is a 422 problem listing each one."""
    limit = resources.settings.policy.max_tools_per_registration
    if len(request.tools) > limit:
        raise PayloadTooLarge(
            f"A registration holds at most {counted(limit, 'tool')}, not {len(request.tools)} "
            "(policy.max_tools_per_registration); send the catalog in parts",
            errors=[{"pointer": body_pointer("tools"), "reason": f"at most {counted(limit, 'tool')}"}],
            limit="policy.max_tools_per_registration",
        )
    servers = {name: info.model_dump(exclude_none=True) for name, info in (request.servers or {}).items()}
    report = await catalog.register_tools(resources, request.tools, request.server, servers)
    body = report.as_dict()
    for error in body["errors"] + body["warnings"]:  # the report's pointers are into the batch; the API's, the body
        error["pointer"] = body_pointer("tools") + error["pointer"]
    if report.errors and not body["tools"]:
        first = report.errors[0]
        raise InvalidTool(
            f"No tool of the batch was accepted; first problem: tool {first.tool!r}, {first.field}: {first.reason}",
            errors=body["errors"],
        )
    return body


@router.delete("/tools/{name}", status_code=204)
async def delete(name: str, resources: ResourcesDep, caller: ToolsAdminDep) -> Response:
    """Remove a tool from the catalog and the index."""
    await removal.delete_tool(resources, name)
    return Response(status_code=204)
