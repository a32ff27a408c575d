"""`toolscout serve | index | search` (`eval`: service/cli/evaluate.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from service.catalog.files import load_catalog_file
from service.cli.index_parts import INDEX_PART, post_in_parts
from service.cli.served_address import elsewhere_hint, other_service, remove_served_url, write_served_url
from service.cli.settings_values import port_number, result_count
from service.cli.start_files import permissions_file_problem, servers_file_problem
from service.cli.terminal import printable
from service.errors import DatabaseUnavailable, IndexUnavailable, ToolscoutError, counted, verb
from service.http_transport import bound_socket, listen_hint, nodelay_transport
from service.settings import SearchSettings, Settings

DEFAULT_K = SearchSettings.model_fields["default_k"].default
# Where `index` and `search` act, which neither `--help` said (nor how to reach a service on another port).
THROUGH_THE_SERVICE = (
    "through the running service at TOOLSCOUT_FRONTEND__API_URL (default http://127.0.0.1:8765; its key in "
    "TOOLSCOUT_FRONTEND__API_KEY), else straight in the data folder of the folder it runs in (TOOLSCOUT_DATA_DIR, "
    "default .toolscout)."
)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = subparsers.add_parser("serve", help="run the REST API, console and upstream gateway over HTTP")
    serve.add_argument("--host", default=None, help="address to listen on (default TOOLSCOUT_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=port_number, default=None, help="port (default TOOLSCOUT_PORT, 8765)")
    serve.set_defaults(func=cmd_serve)

    index = subparsers.add_parser(
        "index",
        help="register and index a catalog file (JSONL or MCP tools/list JSON)",
        description=f"Register and index a catalog file: {THROUGH_THE_SERVICE}",
    )
    index.add_argument("file", type=Path, help="a JSON Lines file (a tool a line) or an MCP tools/list JSON")
    index.add_argument(
        "--server",
        default=None,
        help="server of a tools/list file (default: its file name) and of JSONL lines without one (default: catalog)",
    )
    index.set_defaults(func=cmd_index)

    search = subparsers.add_parser(
        "search",
        help="search the catalog for the tools that fit a request",
        description=f"Search the catalog for the tools that fit a request: {THROUGH_THE_SERVICE}",
    )
    search.add_argument("query", help="what the agent wants to do, in words")
    search.add_argument(
        "-k",
        type=result_count,
        default=None,
        help=f"how many tools (default TOOLSCOUT_SEARCH__DEFAULT_K, {DEFAULT_K})",
    )
    search.add_argument("--server", action="append", default=None, help="only tools of this server (repeatable)")
    search.add_argument("--explain", action="store_true", help="show the score of each signal behind each result")
    search.add_argument("--json", action="store_true", help="print the raw JSON response")
    search.set_defaults(func=cmd_search)


def cmd_serve(args: argparse.Namespace) -> int:
    settings = Settings()
    # The service's own loggers, not only uvicorn's: TOOLSCOUT_LOG_LEVEL unless the command line gives a level.
    logging.getLogger().setLevel((getattr(args, "log_level", None) or settings.log_level).upper())
    host, port = args.host or settings.host, args.port or settings.port
    # The app checks hosts and open mode against the address it is bound to.
    settings.host, settings.port = host, port
    if (problem := servers_file_problem(settings)) is not None:
        print(f"error: {printable(problem)} (TOOLSCOUT_EXECUTION__SERVERS_FILE)", file=sys.stderr)
        return 2
    if (problem := permissions_file_problem(settings)) is not None:
        print(f"error: {printable(problem)} (TOOLSCOUT_POLICY__PERMISSIONS_FILE)", file=sys.stderr)
        return 2
    try:
        sock = bound_socket(host, port)
    except OSError as exc:
        hint = listen_hint(exc, "`toolscout serve`", "TOOLSCOUT_HOST", "TOOLSCOUT_PORT")
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc} ({hint})", file=sys.stderr)
        return 3
    import uvicorn  # the app's modules take seconds to import: after the port is known to be free

    from service.http_transport import listening_server
    from service.main import create_app, stopping
    from service.observability.logging import log_requests_off_loop
    from service.security.proxies import forwarding_options

    json_logs = settings.log_format == "json"  # one JSON line per request replaces uvicorn's access log
    app = create_app(settings)
    config = uvicorn.Config(
        ExplainedStartFailure(app, settings.data_dir.resolve()),
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        access_log=not json_logs,
        # A SIGTERM waits this long for the requests in flight, then cancels them (their calls are logged) and shuts
        # down: one waiting on a database that stopped answering used to keep the process up until SIGKILL.
        timeout_graceful_shutdown=int(settings.execution.shutdown_grace_seconds + 0.999),
        **({"log_config": None} if json_logs else {}),
        **forwarding_options(settings),
    )
    request_lines = log_requests_off_loop()  # after the config set up uvicorn's loggers

    def listening() -> None:
        write_served_url(settings.data_dir, host, port)
        print(
            f"Toolscout on http://{host}:{port}  (console at /console, OpenAPI at /openapi.json; data in "
            f"{settings.data_dir.resolve()})",
            flush=True,
        )

    def stopping_now() -> None:
        # Here, not after run(): uvicorn raises the SIGTERM it caught again once stopped, and the process ends there.
        # Only a server that started says so: a start refused (the folder's index another's) leaves that one's file.
        if server.started:
            remove_served_url(settings.data_dir)
        stopping(app)

    server = listening_server(config, listening, stopping_now)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        request_lines.stop()
    return 0 if server.started else 3  # uvicorn.run's exit status when the start-up failed


class ExplainedStartFailure:
    """The app, whose start-up failures that say what to do (open mode refused, the data folder's index held by
    another process, a data folder that cannot be written) uvicorn logs as their message rather than a whole
    traceback."""

    # The last line of the failure's traceback -> what to add to its message ({data_dir}: the data folder).
    EXPLAINED = {
        "service.security.openmode.StartupRefused: ": "",
        "indexer.index.base.IndexBackendError: qdrant": " (TOOLSCOUT_INDEX__URL: is the Qdrant server running?)",
        "indexer.index.base.IndexBackendError: ": ". Is another `toolscout serve` using {data_dir}?",
        "service.db.engine.DatabaseUnreachable: ": " (TOOLSCOUT_DB__URL)",
        **{
            f"{error}: ": " (TOOLSCOUT_DATA_DIR, {data_dir}, must be a folder this user may write)"
            for error in ("NotADirectoryError", "PermissionError", "FileExistsError", "FileNotFoundError")
        },
    }

    def __init__(self, app: Any, data_dir: Path) -> None:
        self.app, self.data_dir = app, data_dir

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)

        async def send_explained(message: dict[str, Any]) -> None:
            last = (message.get("message") or "").strip().splitlines()[-1:]
            prefix = next((p for p in self.EXPLAINED if last and last[0].startswith(p)), None)
            if message["type"] == "lifespan.startup.failed" and prefix is not None:
                explained = last[0].split(": ", 1)[1] + self.EXPLAINED[prefix].format(data_dir=self.data_dir)
                message = {**message, "message": explained}
            await send(message)

        await self.app(scope, receive, send_explained)


def _api(settings: Settings) -> httpx.Client | None:
    """A client for the running service, or None when it is not running (the CLI then works directly). When this
    data folder's own service listens elsewhere, whose embedded index the CLI could not open, its address is said."""
    headers = {"Authorization": f"Bearer {settings.frontend.api_key}"} if settings.frontend.api_key else {}
    client = httpx.Client(
        base_url=settings.frontend.api_url, headers=headers, timeout=120, transport=nodelay_transport()
    )
    try:
        client.get("/healthz", timeout=0.5).raise_for_status()
    except httpx.HTTPError:
        client.close()
        if settings.index.backend == "edge" and (url := other_service(settings)) is not None:
            raise IndexUnavailable(elsewhere_hint(settings, url)) from None
        return None
    return client


def _service_request(settings: Settings, method: str, path: str, **options: Any) -> httpx.Response | None:
    """A request to the running service, or None when it is not running (the caller then works directly)."""
    client = _api(settings)
    if client is None:
        return None
    try:
        return client.request(method, path, **options)
    finally:
        client.close()


def _post_in_parts(
    settings: Settings,
    tools: list[Any],
    servers: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any] | int | None:
    """Register tools with the running service a part at a time (service/cli/index_parts.py): the summed report, an
    exit code on a refusal, or None when no service runs."""
    client = _api(settings)
    if client is None:
        return None
    try:
        return post_in_parts(client, tools, servers, progress, fail)
    finally:
        client.close()


def fail(error: ToolscoutError | dict[str, Any]) -> int:
    """Print an error (raised here, or the service's problem) as one line; exit status 1."""
    detail = error.detail if isinstance(error, ToolscoutError) else error.get("detail", error)
    if isinstance(error, dict) and error.get("status") == 401:
        detail = f"{detail} (the CLI sends the key in TOOLSCOUT_FRONTEND__API_KEY)"
    print(f"error: {printable(detail)}", file=sys.stderr)
    return 1


async def _direct(fn: Any) -> Any:
    """Run fn(resources) against the local data folder with the service's own start-up and shutdown."""
    from indexer.index.base import IndexBackendError
    from service.catalog.reconcile import reconcile_index
    from service.db.engine import DatabaseUnreachable
    from service.resources import build_resources, close_resources, start_resources
    from service.search.service import start_search

    settings = Settings()
    resources = build_resources(settings)
    try:
        await start_resources(resources)
    except DatabaseUnreachable as exc:
        raise DatabaseUnavailable(f"{exc} (TOOLSCOUT_DB__URL)") from None
    except IndexBackendError as exc:
        await close_resources(resources)
        if settings.index.backend != "edge":
            raise IndexUnavailable(f"{exc} (TOOLSCOUT_INDEX__URL: is the Qdrant server running?)") from exc
        # The embedded index has one owner: most often a `toolscout serve` this command did not reach.
        raise IndexUnavailable(
            f"{exc}. Is a `toolscout serve` using {settings.data_dir.resolve()}? The CLI reaches a running service "
            f"at TOOLSCOUT_FRONTEND__API_URL ({settings.frontend.api_url}): set it to the service's address"
        ) from exc
    await start_search(resources)
    try:
        await reconcile_index(resources)
        return await fn(resources)
    finally:
        await close_resources(resources)


class _Progress:
    """A one-line progress bar with tools/s on stderr."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        rate = done / max(time.perf_counter() - self.started, 1e-9)
        width = 30
        filled = int(width * done / max(total, 1))
        bar = f"[{'#' * filled}{'.' * (width - filled)}]"
        sys.stderr.write(f"\r{bar} {done}/{counted(total, 'tool')}  {rate:,.0f} tools/s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def cmd_index(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        catalog_file = load_catalog_file(args.file, args.server)
    except ToolscoutError as exc:
        return fail(exc)
    tools, servers = catalog_file.tools, catalog_file.servers
    if not tools:  # exit status 1 said nothing but "created 0, ..."
        return fail({"detail": f"{args.file}: no tools in it (a JSON Lines tool a line, or an MCP tools/list)"})
    for line in _kept_and_lost(len(catalog_file.repairs), catalog_file.repairs, 0, []):
        print(printable(line), file=sys.stderr)
    # Through the service a bar moves once a part (1,000 tools, ~30 s to embed on 2 cores): 4,076 tools said nothing
    # for a minute and a half.
    body = _post_in_parts(settings, tools, servers, _Progress() if len(tools) > INDEX_PART else None)
    if isinstance(body, int):
        return body
    if body is None:
        from service.catalog import service as catalog

        async def run(resources: Any) -> dict[str, Any]:
            resources.progress = _Progress()
            report = await catalog.register_tools(resources, tools, servers=servers)
            return report.as_dict()

        try:
            body = asyncio.run(_direct(run))
        except ToolscoutError as exc:
            return fail(exc)
    print(
        f"created {body['created']}, updated {body['updated']}, unchanged {body['unchanged']}, "
        f"rejected {len(body['errors'])}, held for review {len(body['held'])}"
    )
    for error in body["errors"][:20]:
        print(printable(f"  rejected {error['tool']} ({error['pointer']}): {error['reason']}"))
    for warning in body.get("warnings", [])[:20]:
        print(printable(f"  ignored in {warning['tool']} ({warning['pointer']}): {warning['reason']}"))
    for held in body["held"][:20]:
        print(printable(f"  held {held['name']}: {held['reason']} (`toolscout tools approve NAME` releases it)"))
    return 0 if body["created"] + body["updated"] + body["unchanged"] else 1


def _print_results(body: dict[str, Any], servers: list[str] | None) -> None:
    print(f"{counted(len(body['results']), 'tool')} in {body['latency_ms']:.1f} ms")
    for warning in body.get("warnings") or []:  # a server no tool has, with the nearest one
        print(f"--server: {printable(warning['reason'])}", file=sys.stderr)
    if not body["results"] and servers:
        # A filter that leaves nothing is not an empty catalog (`toolscout servers list` shows the ids).
        names = ", ".join(printable(server) for server in servers)
        print(f"No tool of the servers {names} matched (`toolscout servers list` lists the servers).", file=sys.stderr)
    elif not body["results"]:
        print(
            "No tool matched. Is the catalog empty? Start `toolscout serve` (it indexes demo tools) or run "
            "`toolscout index FILE`.",
            file=sys.stderr,
        )
    for rank, result in enumerate(body["results"], start=1):
        description = printable(" ".join(result["description"].split())[:140])
        unavailable = ""
        if result.get("available") is False:  # its server cannot take the call now (README: can it be called now)
            unavailable = f"  [unavailable: {printable(result.get('unavailable_reason'))}]"
        print(f"{rank:>2}. {printable(result['name'])}  ({result['score']:.3f}){unavailable}\n    {description}")
        if "explain" in result:
            print(f"    {json.dumps(result['explain'])}")


def cmd_search(args: argparse.Namespace) -> int:
    settings = Settings()
    request = {"query": args.query, "k": args.k, "servers": args.server, "explain": args.explain}
    response = _service_request(settings, "POST", "/search", json=request)
    if response is not None:
        body = response.json()
        if response.status_code >= 400:
            return fail(body)
    else:
        from service.cli.database import elsewhere, missing_database

        if (missing := missing_database(settings)) is not None:
            # Nothing to find: it made that database, exported the model (30 s) and found no tool.
            tried = f"no service at {settings.frontend.api_url} (TOOLSCOUT_FRONTEND__API_URL) and "
            return fail({"detail": tried + elsewhere(missing)})
        from service.policy.callers import OPEN_CALLER
        from service.search.routes import search_json
        from service.search.service import filter_warnings, search_tools

        k = settings.search.default_k if args.k is None else args.k

        async def run(resources: Any) -> dict[str, Any]:
            search_id, outcome = await search_tools(
                resources, OPEN_CALLER, args.query, k=k, servers=args.server, explain=args.explain
            )
            # The answer POST /search gives, `parts` of a split request with --explain included.
            warnings = filter_warnings(resources, OPEN_CALLER, args.server, None)
            return json.loads(search_json(search_id, args.query, k, outcome, args.explain, warnings))

        try:
            body = asyncio.run(_direct(run))
        except ToolscoutError as exc:
            return fail(exc)
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        _print_results(body, args.server)
    return 0


def _kept_and_lost(repaired: int, repairs: list[str], rejected: int, rejections: list[str]) -> list[str]:
    """What a catalog file's import changed to keep its tools, and the tools it could not keep (the first 20)."""
    lines: list[str] = []
    if repaired:
        lines += [f"repaired {counted(repaired, 'tool')} to keep {verb(repaired, 'it', 'them')}:"]
        lines += [f"  {r}" for r in repairs[:20]]
    if rejected:
        lines += [f"rejected {counted(rejected, 'tool')}:"] + [f"  {r}" for r in rejections[:20]]
    return lines
