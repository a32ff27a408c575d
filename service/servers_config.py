"""Which upstream MCP servers to run: the `mcpServers` file format MCP clients already use, and the demo set.

A servers file is JSON (or YAML) in the shape Claude Desktop, Cursor and VS Code read:

    {"mcpServers": {
        "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}, "cwd": "/tmp"},
        "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}}}

`servers` (VS Code) is accepted in place of `mcpServers`; `type` may be `stdio`, `http` or `streamable-http`;
`disabled: true` skips an entry; `timeout` (seconds) overrides the call timeout of that server. `${VAR}` and
`${env:VAR}` in commands, arguments, env, cwd, URL and headers are expanded from the environment when the
server starts, so secrets stay out of the file and out of the catalog database.

The demo servers (used when no servers file is set) install themselves on first start: the PyPI ones into a
virtual environment of their own (their dependencies never enter Toolscout's environment; a module already
importable by this interpreter is used in place), the npm ones with `npm install` when Node is present. Both
go to the toolchain folder (`execution.toolchain_dir`, default `~/.cache/toolscout/upstream`) shared by every
data folder of the machine; the demo git repository and folder are created under the data folder.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import yaml
from pydantic import BaseModel, ConfigDict, Field

from indexer.tools import normalize_server_id
from service.errors import InvalidRequest
from service.settings import Settings

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]
Source = Literal["file", "demo", "api"]

_HTTP_TYPES = {"http", "streamable-http", "streamable_http", "streamablehttp"}
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
_REDACTED = "***"

# Demo servers: id -> (PyPI package, module) and id -> npm package.
PYTHON_DEMO = {
    "time": ("mcp-server-time", "mcp_server_time"),
    "git": ("mcp-server-git", "mcp_server_git"),
    "fetch": ("mcp-server-fetch", "mcp_server_fetch"),
}
NODE_DEMO = {
    "memory": "@modelcontextprotocol/server-memory",
    "filesystem": "@modelcontextprotocol/server-filesystem",
    "everything": "@modelcontextprotocol/server-everything",
}


class ToolchainError(RuntimeError):
    """A demo server's packages could not be installed (no network, no Node, a failing pip or npm)."""


class ServerSpec(BaseModel):
    """How to reach one upstream MCP server."""

    model_config = ConfigDict(frozen=True)

    id: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float | None = None
    source: Source = "file"
    # A demo server that needs its toolchain before it can start: ("python", module) or ("node", package).
    demo: tuple[str, str] | None = None

    def config(self) -> dict[str, Any]:
        """What the catalog stores for this server (unexpanded, so `${VAR}` secrets stay out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def public_config(self) -> dict[str, Any]:
        """The configuration shown over the API: env and header values are redacted."""
        config = self.config()
        config.pop("demo", None)
        if self.env:
            config["env"] = {key: _REDACTED for key in self.env}
        if self.headers:
            config["headers"] = {key: _REDACTED for key in self.headers}
        return config

    def expanded(self) -> ServerSpec:
        """This spec with `${VAR}` references replaced from the environment (at start, never stored)."""
        return self.model_copy(
            update={
                "command": _expand(self.command) if self.command else None,
                "args": tuple(_expand(a) for a in self.args),
                "env": {k: _expand(v) for k, v in self.env.items()},
                "cwd": _expand(self.cwd) if self.cwd else None,
                "url": _expand(self.url) if self.url else None,
                "headers": {k: _expand(v) for k, v in self.headers.items()},
            }
        )


def _expand(text: str) -> str:
    return _VARIABLE.sub(lambda m: os.environ.get(m.group(1), ""), text)


def _fail(where: str, reason: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {reason}", errors=[{"pointer": where, "reason": reason}])


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        raise _fail(where, "must be a list of strings")
    return tuple(str(v) for v in value)


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(v, str | int | float | bool) for v in value.values()
    ):
        raise _fail(where, "must be an object of string values")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def parse_server_entry(
    server_id: str, entry: Any, *, source: Source = "file", where: str | None = None
) -> ServerSpec:
    """One `mcpServers` entry as a ServerSpec; InvalidRequest names the bad field with a JSON pointer."""
    where = where if where is not None else f"/mcpServers/{server_id}"
    if not isinstance(entry, Mapping):
        raise _fail(where, "must be an object")
    sid = normalize_server_id(server_id)
    if not sid or not server_id.strip():
        raise _fail(where, "the server id is empty")
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    timeout = entry.get("timeout_seconds", entry.get("timeout"))
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise _fail(f"{where}/timeout", "must be a positive number of seconds")
    if kind == "sse":
        raise _fail(f"{where}/type", "the legacy SSE transport is not supported; use streamable HTTP")
    if "url" in entry or kind in _HTTP_TYPES:
        url = entry.get("url")
        if not isinstance(url, str) or not re.match(r"^(https?://|\$\{)", url):
            raise _fail(f"{where}/url", "must be an http:// or https:// URL")
        return ServerSpec(
            id=sid, transport="http", url=url, headers=_string_map(entry.get("headers"), f"{where}/headers"),
            timeout_seconds=timeout, source=source,
        )
    if kind not in ("", "stdio"):
        raise _fail(f"{where}/type", f"unknown transport {kind!r} (stdio or http)")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise _fail(f"{where}/command", "a stdio server needs a command (or give a url for streamable HTTP)")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _fail(f"{where}/cwd", "must be a string")
    return ServerSpec(
        id=sid, transport="stdio", command=command, args=_strings(entry.get("args"), f"{where}/args"),
        env=_string_map(entry.get("env"), f"{where}/env"), cwd=cwd, timeout_seconds=timeout, source=source,
    )


def parse_servers_document(document: Any, *, source: Source = "file") -> list[ServerSpec]:
    """All enabled servers of an `mcpServers` (or VS Code `servers`) document."""
    if not isinstance(document, Mapping):
        raise _fail("", "a servers file is a JSON object with an `mcpServers` member")
    key = "mcpServers" if "mcpServers" in document else "servers" if "servers" in document else None
    if key is None:
        raise _fail("", "a servers file is a JSON object with an `mcpServers` member")
    servers = document[key]
    if not isinstance(servers, Mapping):
        raise _fail(f"/{key}", "must be an object of named servers")
    specs: dict[str, ServerSpec] = {}
    for name, entry in servers.items():
        if isinstance(entry, Mapping) and entry.get("disabled") is True:
            continue
        spec = parse_server_entry(str(name), entry, source=source, where=f"/{key}/{name}")
        if spec.id in specs:
            raise _fail(f"/{key}/{name}", f"two servers have the id {spec.id!r}")
        specs[spec.id] = spec
    return list(specs.values())


def load_servers_file(path: Path) -> list[ServerSpec]:
    """Read a servers file (JSON, or YAML by extension)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read servers file {path}: {exc.strerror or exc}") from exc
    try:
        document = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidRequest(f"servers file {path} is not valid {'YAML' if path.suffix != '.json' else 'JSON'}: {exc}") from exc
    try:
        return parse_servers_document(document)
    except InvalidRequest as exc:
        raise InvalidRequest(f"servers file {path}: {exc.detail}", **exc.extensions) from exc


def configured_servers(settings: Settings) -> list[ServerSpec]:
    """The servers file when one is set, otherwise the demo servers when they are enabled."""
    if settings.execution.servers_file is not None:
        return load_servers_file(settings.execution.servers_file)
    if settings.execution.demo_servers:
        return demo_servers(settings)
    return []


# ---------------------------------------------------------------------------------------------- the demo


def default_toolchain_dir() -> Path:
    """Where demo servers' packages are installed, shared by every data folder of this user."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolscout" / "upstream"


def toolchain_dir(settings: Settings) -> Path:
    """The configured toolchain folder or the default one."""
    return (settings.execution.toolchain_dir or default_toolchain_dir()).resolve()


def node_available() -> bool:
    """Node and npm are on PATH."""
    return shutil.which("node") is not None and shutil.which("npm") is not None


def demo_servers(settings: Settings) -> list[ServerSpec]:
    """The demo set: time, git (on a demo repository), fetch; memory, filesystem and everything with Node."""
    demo = (settings.data_dir / "demo").resolve()
    specs = [
        ServerSpec(id="time", transport="stdio", command="python", args=("-m", "mcp_server_time"),
                   source="demo", demo=("python", "time")),
        ServerSpec(id="fetch", transport="stdio", command="python", args=("-m", "mcp_server_fetch"),
                   source="demo", demo=("python", "fetch")),
    ]
    if shutil.which("git"):
        specs.append(ServerSpec(
            id="git", transport="stdio", command="python",
            args=("-m", "mcp_server_git", "--repository", str(demo / "repo")), source="demo", demo=("python", "git"),
        ))
    else:
        logger.warning("git is not installed: the demo git server is skipped")
    if node_available():
        specs += [
            ServerSpec(id="memory", transport="stdio", command="node", env={"MEMORY_FILE_PATH": str(demo / "memory.jsonl")},
                       source="demo", demo=("node", "memory")),
            ServerSpec(id="filesystem", transport="stdio", command="node", args=(str(demo / "files"),),
                       source="demo", demo=("node", "filesystem")),
            ServerSpec(id="everything", transport="stdio", command="node", args=("stdio",),
                       source="demo", demo=("node", "everything")),
        ]
    else:
        logger.info("Node.js is not installed: the npm demo servers are skipped")
    return specs


async def prepare_demo_server(settings: Settings, spec: ServerSpec) -> ServerSpec:
    """Install what a demo server needs and return the spec with its real command; others pass through."""
    if spec.demo is None:
        return spec
    kind, key = spec.demo
    await anyio.to_thread.run_sync(create_demo_data, settings.data_dir / "demo")
    if kind == "python":
        python = await ensure_python_packages(toolchain_dir(settings), [pkg for pkg, _ in PYTHON_DEMO.values()],
                                              [mod for _, mod in PYTHON_DEMO.values()])
        return spec.model_copy(update={"command": python})
    node_modules = await ensure_node_packages(toolchain_dir(settings), list(NODE_DEMO.values()))
    entry = node_entry(node_modules, NODE_DEMO[key])
    return spec.model_copy(update={"command": shutil.which("node") or "node", "args": (str(entry), *spec.args)})


def create_demo_data(folder: Path) -> None:
    """A demo folder with a few files and a git repository with two commits (idempotent)."""
    files = folder / "files"
    if not (files / "README.md").exists():
        files.mkdir(parents=True, exist_ok=True)
        (files / "README.md").write_text(
            "# Demo folder\n\nFiles that the demo filesystem server can read, search and edit.\n", encoding="utf-8"
        )
        (files / "notes.txt").write_text(
            "Meeting notes\n- ship the search API\n- measure /execute overhead\n", encoding="utf-8"
        )
        (files / "cities.csv").write_text(
            "city,country,timezone\nTokyo,Japan,Asia/Tokyo\nParis,France,Europe/Paris\n"
            "New York,United States,America/New_York\n", encoding="utf-8"
        )
    repo = folder / "repo"
    if (repo / ".git").exists() or shutil.which("git") is None:
        return
    repo.mkdir(parents=True, exist_ok=True)
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=Toolscout Demo", "-c", "user.email=demo@toolscout.invalid",
             "-c", "init.defaultBranch=main", *args],
            cwd=repo, check=True, capture_output=True,
        )

    git("init", "-q")
    (repo / "README.md").write_text("# Demo repository\n\nA small repository for the git MCP server.\n")
    git("add", "README.md")
    git("commit", "-q", "-m", "Add a README")
    (repo / "hello.py").write_text('def hello(name: str) -> str:\n    return f"Hello, {name}!"\n')
    git("add", "hello.py")
    git("commit", "-q", "-m", "Add hello()")


@asynccontextmanager
async def _locked(folder: Path) -> AsyncIterator[None]:
    """An exclusive lock on the toolchain folder, so two processes never install into it at once."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / ".lock", "w")  # noqa: SIM115 - released in the finally below
    try:
        await anyio.to_thread.run_sync(fcntl.flock, handle, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


async def _run(command: list[str], what: str, timeout: float = 900) -> None:
    logger.info("%s: %s", what, " ".join(command))
    with anyio.fail_after(timeout):
        result = await anyio.run_process(command, check=False)
    if result.returncode != 0:
        output = (result.stderr or result.stdout or b"").decode(errors="replace").strip().splitlines()
        raise ToolchainError(f"{what} failed (exit {result.returncode}): {' | '.join(output[-5:])}")


def _importable(modules: Iterable[str]) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


async def ensure_python_packages(folder: Path, packages: list[str], modules: list[str]) -> str:
    """The interpreter that runs these PyPI servers: this one when it can import them, else a virtual
    environment under `folder/python`, created and filled with pip on first use."""
    if _importable(modules):
        return sys.executable
    python = folder / "python" / "bin" / "python"
    check = [str(python), "-c", "import " + ", ".join(modules)]
    async with _locked(folder):
        if python.exists() and (await anyio.run_process(check, check=False)).returncode == 0:
            return str(python)
        logger.warning("installing the demo MCP servers from PyPI into %s (first start only)", python.parent.parent)
        if not python.exists():
            await _run([sys.executable, "-m", "venv", str(folder / "python")], "creating the demo servers' venv")
        await _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
                   "pip install " + " ".join(packages))
    return str(python)


async def ensure_node_packages(folder: Path, packages: list[str]) -> Path:
    """`folder/node/node_modules` holding these npm packages, installed with npm on first use."""
    if not node_available():
        raise ToolchainError("Node.js and npm are needed for this server and are not on PATH")
    prefix = folder / "node"
    modules = prefix / "node_modules"
    if all((modules / p / "package.json").exists() for p in packages):
        return modules
    async with _locked(folder):
        missing = [p for p in packages if not (modules / p / "package.json").exists()]
        if missing:
            logger.warning("installing the demo MCP servers from npm into %s (first start only)", prefix)
            prefix.mkdir(parents=True, exist_ok=True)
            npm = shutil.which("npm") or "npm"
            await _run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
                        *missing], "npm install " + " ".join(missing))
    return modules


def node_entry(node_modules: Path, package: str) -> Path:
    """The script a package's `bin` names (what `npx package` would run)."""
    manifest = json.loads((node_modules / package / "package.json").read_text(encoding="utf-8"))
    binary = manifest.get("bin")
    if isinstance(binary, dict):
        binary = next(iter(binary.values()), None)
    if not isinstance(binary, str):
        binary = manifest.get("main", "dist/index.js")
    return (node_modules / package / binary).resolve()


__all__ = [
    "ServerSpec", "ToolchainError", "parse_server_entry", "parse_servers_document", "load_servers_file",
    "configured_servers", "demo_servers", "prepare_demo_server", "create_demo_data", "ensure_python_packages",
    "ensure_node_packages", "node_entry", "toolchain_dir", "default_toolchain_dir", "node_available",
]
