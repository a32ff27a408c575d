"""`toolscout tools held | approve NAME | approve-info SERVER`: the tools (and servers' changed info) held for an
admin's review, and their release.

Through the running service (TOOLSCOUT_FRONTEND__API_URL, with an admin key in TOOLSCOUT_FRONTEND__API_KEY) when it
answers, else straight on the local data folder, as `index` does."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from service.cli.core import _direct, _service_request, fail
from service.cli.terminal import printable
from service.errors import NotFound, ToolscoutError, counted
from service.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tools = subparsers.add_parser("tools", help="list or release tools held for review (poisoning, changed tools)")
    commands = tools.add_subparsers(dest="tools_command", required=True)
    held = commands.add_parser("held", help="list the tools held for an admin's review, and why")
    held.add_argument("--server", default=None, help="only this server's")
    held.add_argument("--json", action="store_true", help="print the raw JSON response")
    held.set_defaults(func=cmd_held)
    approve = commands.add_parser("approve", help="release a held tool: indexed, listed and callable again")
    approve.add_argument("name", help="qualified name (<server>__<tool>)")
    approve.add_argument("--json", action="store_true", help="print the raw JSON response")
    approve.set_defaults(func=cmd_approve)
    info = commands.add_parser(
        "approve-info", help="release a server's held info (its changed description or instructions) into ranking"
    )
    info.add_argument("server", help="server id")
    info.add_argument("--json", action="store_true", help="print the raw JSON response")
    info.set_defaults(func=cmd_approve_info)


def service_or_local(method: str, path: str, local: Any, **options: Any) -> dict[str, Any] | int:
    """The running service's answer to `method path`, or, when no service runs, `local(resources)` on the data
    folder, which must hold a database (made empty, it said "0 tools held" of a folder that was not the service's);
    an exit status on an error."""
    response = _service_request(Settings(), method, path, **options)
    if response is not None:
        body: dict[str, Any] = response.json()
        return fail(body) if response.status_code >= 400 else body
    from service.cli.database import elsewhere, missing_database  # the database layer only when no service answers

    missing = missing_database(Settings())
    if missing is not None:
        return fail(NotFound(elsewhere(missing)))
    try:
        return dict(asyncio.run(_direct(local)))
    except ToolscoutError as exc:
        return fail(exc)


def reported(args: argparse.Namespace, body: dict[str, Any] | int, line: Callable[[dict[str, Any]], str]) -> int:
    """The exit status of a service-or-local command, its answer printed: as JSON with --json, else `line(body)`
    (a status is a failure already printed)."""
    if isinstance(body, int):
        return body
    print(json.dumps(body, indent=2) if args.json else line(body))
    return 0


def cmd_held(args: argparse.Namespace) -> int:
    params = {"held": "true", "limit": 1000, **({"server": args.server} if args.server else {})}
    body = service_or_local("GET", "/tools", lambda resources: _held_locally(resources, args.server), params=params)
    if isinstance(body, int):
        return body
    if args.json:
        print(json.dumps(body["tools"], indent=2))
        return 0
    for tool in body["tools"]:
        print(f"{printable(tool['name'])}  held since {tool['held'].get('held_at')}")
        print(f"  {printable(tool['held']['reason'])}")
    print(f"{counted(body['total'], 'tool')} held")
    for server in body.get("held_servers", []):
        print(f"server {printable(server['server'])}  info held since {server.get('held_at')}")
        print(f"  {printable(server['reason'])} (`toolscout tools approve-info SERVER` takes it)")
    return 0


async def _held_locally(resources: Any, server: str | None) -> dict[str, Any]:
    from service.catalog.lookup import list_tools
    from service.catalog.review import admin_view, held_server_infos

    async with resources.session() as session:
        rows, total = await list_tools(session, server=server, limit=1000, held=True)
    return {"tools": [admin_view(r) for r in rows], "total": total, "held_servers": await held_server_infos(resources)}


def cmd_approve(args: argparse.Namespace) -> int:
    from service.catalog.review import approve_tool

    body = service_or_local("POST", f"/tools/{quote(args.name, safe='')}/approve", lambda r: approve_tool(r, args.name))
    return reported(args, body, lambda done: f"approved: {printable(done['name'])} is indexed and callable again")


def cmd_approve_info(args: argparse.Namespace) -> int:
    from service.catalog.review import approve_info

    path = f"/servers/{quote(args.server, safe='')}/info/approve"
    body = service_or_local("POST", path, lambda r: approve_info(r, args.server))
    return reported(
        args, body, lambda done: f"approved: server {printable(done['server'])}'s info ranks its tools from now on"
    )
