"""`toolscout servers install | list | remove`: the demo servers' packages; the servers of a running service; a server
and its tools out of the catalog (an indexed catalog file's too: `index` had no undoing but a DELETE by hand)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import httpx

from service.cli.core import fail
from service.cli.served_address import elsewhere_hint, other_service
from service.cli.terminal import printable
from service.errors import counted
from service.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    servers = subparsers.add_parser(
        "servers", help="install the demo servers, list the upstream MCP servers or remove one"
    )
    commands = servers.add_subparsers(dest="servers_command", required=True)
    install = commands.add_parser(
        "install",
        help="install the demo servers' packages (PyPI into their own venv; npm when Node is present)",
    )
    install.add_argument("--no-node", action="store_true", help="skip the npm servers")
    install.set_defaults(func=cmd_install)
    listing = commands.add_parser("list", help="list the running service's servers and their health")
    listing.add_argument("--json", action="store_true", help="print the raw JSON response")
    listing.set_defaults(func=cmd_list)
    remove = commands.add_parser(
        "remove",
        help="remove a server and its tools from the catalog (an indexed file's server too)",
        description="Remove a server and its tools from the catalog and the index (an indexed file's server too): "
        "through the running service with an admin key, else in the data folder.",
    )
    remove.add_argument("server", help="the server's name, as `servers list` shows it")
    remove.add_argument("--json", action="store_true", help="print the raw JSON response")
    remove.set_defaults(func=cmd_remove)


async def _install(settings: Settings, node: bool) -> dict[str, str]:
    from service.upstream.demo import (
        NODE_DEMO,
        PYTHON_DEMO,
        ensure_node_packages,
        ensure_python_packages,
        node_available,
        toolchain_dir,
    )

    folder = toolchain_dir(settings)
    python = await ensure_python_packages(
        folder, [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )
    installed = {"python": python}
    if node and node_available():
        installed["node_modules"] = str(await ensure_node_packages(folder, list(NODE_DEMO.values())))
    elif node:
        installed["node_modules"] = "skipped: Node.js and npm are not on PATH"
    return installed


def cmd_install(args: argparse.Namespace) -> int:
    installed = asyncio.run(_install(Settings(), node=not args.no_node))
    for key, value in installed.items():
        print(f"{key}: {value}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    settings = Settings()
    headers = {"Authorization": f"Bearer {settings.frontend.api_key}"} if settings.frontend.api_key else {}
    try:
        response = httpx.get(f"{settings.frontend.api_url}/servers", headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        if (url := other_service(settings)) is not None:
            print(f"error: {elsewhere_hint(settings, url)}", file=sys.stderr)
            return 1
        # It named neither the setting nor the start: the servers are the running service's, asked at this URL.
        print(
            f"error: no service at {settings.frontend.api_url} (TOOLSCOUT_FRONTEND__API_URL): {printable(str(exc))}; "
            "start it with `toolscout serve`, or set TOOLSCOUT_FRONTEND__API_URL to its address",
            file=sys.stderr,
        )
        return 1
    if response.status_code != 200:
        return fail(response.json())
    servers = response.json()["servers"]
    if args.json:
        print(json.dumps(servers, indent=2))
        return 0
    header = f"{'server':<16} {'transport':<9} {'state':<10} {'tools':>5} {'restarts':>8} {'p50 ms':>8}"
    print(f"{header}  last error")
    for server in servers:
        # A caller who is not an admin is shown id, state, tools and last sync only (no transport or health).
        health = server.get("health") or {}
        latency = (health.get("latency") or {}).get("p50_ms")
        print(
            f"{server['id']:<16} {server.get('transport', ''):<9} {server['state']:<10} {server['tools']:>5} "
            f"{health.get('restarts', ''):>8} {'' if latency is None else latency:>8}  "
            f"{printable((health.get('last_error') or '')[:60])}"
        )
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    from service.cli.tools import reported, service_or_local

    path = f"/servers/{quote(args.server, safe='')}"
    body = service_or_local("DELETE", path, lambda resources: _removed_locally(resources, args.server))
    return reported(
        args,
        body,
        lambda gone: f"removed {printable(gone['id'])} and its {counted(len(gone['removed_tools']), 'tool')}",
    )


async def _removed_locally(resources: Any, server: str) -> dict[str, Any]:
    from service.catalog.removal import remove_server

    return {"id": server, "removed_tools": await remove_server(resources, server)}
