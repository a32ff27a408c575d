"""`toolscout mcp`: the MCP front end, a process of its own that calls the REST API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import anyio

from service.cli.settings_values import port_number
from service.errors import ToolscoutError
from service.http_transport import bound_socket, listen_hint
from service.mcp import MODES
from service.security.openmode import is_loopback
from service.settings import Settings, http_url, url_path


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    mcp = subparsers.add_parser(
        "mcp",
        help="run the MCP front end (stdio or streamable HTTP) for chat clients",
        description="One MCP server in front of every tool of every upstream server, calling the Toolscout "
        "REST API at TOOLSCOUT_FRONTEND__API_URL (key: TOOLSCOUT_FRONTEND__API_KEY).",
    )
    mcp.add_argument("--mode", choices=MODES, default="lazy", help="what tools/list shows (default lazy)")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default stdio")
    mcp.add_argument("--profile", default=None, help="a named scope of the profiles file")
    mcp.add_argument("--api-url", type=api_url, default=None, help="the REST API (default: settings frontend.api_url)")
    mcp.add_argument("--host", default=None, help="HTTP host (default: settings frontend.http_host)")
    mcp.add_argument("--port", type=port_number, default=None, help="HTTP port (default: settings frontend.http_port)")
    mcp.add_argument("--path", type=path, default=None, help="HTTP path (default: settings frontend.http_path, /mcp)")
    mcp.set_defaults(func=cmd_mcp)


def api_url(value: str) -> str:
    return _checked(http_url, value)


def path(value: str) -> str:
    return _checked(url_path, value)


def _checked(check: Callable[[str], str], value: str) -> str:
    try:
        return check(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {value!r}") from None


def cmd_mcp(args: argparse.Namespace) -> int:
    from service.mcp.profiles import select_profile
    from service.mcp.serve import serve_http, serve_stdio
    from service.mcp.server import create_frontend

    settings = Settings()
    if args.api_url:
        settings.frontend.api_url = args.api_url
    try:
        profile = select_profile(settings.frontend.profiles_file, args.profile)
    except ToolscoutError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 2
    frontend = create_frontend(settings, mode=args.mode, profile=profile, transport=args.transport)
    if args.transport == "stdio":
        if sys.stdin.isatty():  # typed in a terminal, it waited in silence for JSON-RPC a person would not send
            print(
                f"Toolscout MCP front end ({args.mode}) on stdin/stdout -> {settings.frontend.api_url}: a chat client "
                "starts it (README: MCP front end), `--transport http` serves it over HTTP; Ctrl-C stops it",
                file=sys.stderr,
                flush=True,
            )
        anyio.run(serve_stdio, frontend)
    else:
        host = args.host or settings.frontend.http_host
        port = args.port or settings.frontend.http_port
        if not is_loopback(host) and not settings.frontend.http_api_key:
            # Anyone who reached the port would call tools with this front end's API key: refused, as the REST API
            # refuses to serve without keys off loopback.
            print(
                f"error: refusing to listen on {host}, reachable from other machines, without a key: set "
                "TOOLSCOUT_FRONTEND__HTTP_API_KEY (clients then send `Authorization: Bearer <key>`), or bind to "
                "127.0.0.1",
                file=sys.stderr,
            )
            return 2
        try:
            sock = bound_socket(host, port)
        except OSError as exc:  # was uvicorn's log line of an errno, after the front end had started
            hint = listen_hint(exc, "front end", "TOOLSCOUT_FRONTEND__HTTP_HOST", "TOOLSCOUT_FRONTEND__HTTP_PORT")
            print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc} ({hint})", file=sys.stderr)
            return 3
        api_url = settings.frontend.api_url

        def announce(url: str) -> None:
            # Printed once the socket accepts connections: whoever waits for this line may connect at once.
            print(f"Toolscout MCP front end ({args.mode}) on {url} -> {api_url}", file=sys.stderr, flush=True)

        anyio.run(serve_http, frontend, host, port, args.path, announce, sock)
    return 0
