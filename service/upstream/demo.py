"""The demo upstream servers, which run when no servers file is set: real MCP servers from PyPI and npm.

time, fetch and git (on a demo repository) from PyPI; memory, filesystem (on a demo folder) and everything
from npm when Node is present. They install themselves on first start: the PyPI ones into a virtual
environment of their own (their dependencies never enter Toolscout's environment; modules this interpreter can
already import are used in place), the npm ones with `npm install`. Both go to the toolchain folder
(`execution.toolchain_dir`, default ~/.cache/toolscout/upstream), shared by every data folder of the machine
and locked while installing; the demo repository and folder are created under the data folder.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio

from service.settings import Settings
from service.upstream.config import ServerSpec

logger = logging.getLogger(__name__)

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


# The hosts everything's gzip-file-as-resource may fetch from (its default URL's); data: URIs need none. Left
# empty, it fetched any http(s) URL from this machine for any caller who may use it: 127.0.0.1's services, the
# cloud metadata address, the private network (the fetch demo server refuses non-public addresses itself).
EVERYTHING_GZIP_DOMAINS = "raw.githubusercontent.com"


class ToolchainError(RuntimeError):
    """A demo server's packages could not be installed (no network, no Node, a failing pip or npm)."""


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
        ServerSpec(
            id="time",
            transport="stdio",
            command="python",
            args=("-m", "mcp_server_time"),
            source="demo",
            demo=("python", "time"),
        ),
        ServerSpec(
            id="fetch",
            transport="stdio",
            command="python",
            args=("-m", "mcp_server_fetch"),
            egress_proxy=True,  # any caller allowed the tool hands it a URL
            source="demo",
            demo=("python", "fetch"),
        ),
    ]
    if shutil.which("git"):
        specs.append(
            ServerSpec(
                id="git",
                transport="stdio",
                command="python",
                args=("-m", "mcp_server_git", "--repository", str(demo / "repo")),
                source="demo",
                demo=("python", "git"),
            )
        )
    else:
        logger.warning("git is not installed: the demo git server is skipped")
    if node_available():
        specs += [
            ServerSpec(
                id="memory",
                transport="stdio",
                command="node",
                env={"MEMORY_FILE_PATH": str(demo / "memory.jsonl")},
                source="demo",
                demo=("node", "memory"),
            ),
            ServerSpec(
                id="filesystem",
                transport="stdio",
                command="node",
                args=(str(demo / "files"),),
                source="demo",
                demo=("node", "filesystem"),
            ),
            ServerSpec(
                id="everything",
                transport="stdio",
                command="node",
                args=("stdio",),
                env={"GZIP_ALLOWED_DOMAINS": EVERYTHING_GZIP_DOMAINS},
                egress_proxy=True,  # its gzip resource fetches a URL; Node's fetch is confined by the preload
                source="demo",
                demo=("node", "everything"),
            ),
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
        python = await ensure_python_packages(
            toolchain_dir(settings),
            [pkg for pkg, _ in PYTHON_DEMO.values()],
            [mod for _, mod in PYTHON_DEMO.values()],
        )
        return spec.model_copy(update={"command": python})
    node_modules = await ensure_node_packages(toolchain_dir(settings), list(NODE_DEMO.values()))
    entry = node_entry(node_modules, NODE_DEMO[key])
    return spec.model_copy(
        update={"command": shutil.which("node") or "node", "args": (str(entry), *spec.args)}
    )


# The demo servers are prepared concurrently; their shared demo data is created once.
_DEMO_DATA_LOCK = threading.Lock()


def create_demo_data(folder: Path) -> None:
    """A demo folder with a few files and a git repository with two commits (idempotent)."""
    with _DEMO_DATA_LOCK:
        _create_demo_data(folder)


def _create_demo_data(folder: Path) -> None:
    files = folder / "files"
    if not (files / "README.md").exists():
        files.mkdir(parents=True, exist_ok=True)
        (files / "README.md").write_text(
            "# Demo folder\n\nFiles that the demo filesystem server can read, search and edit.\n",
            encoding="utf-8",
        )
        (files / "notes.txt").write_text(
            "Meeting notes\n- ship the search API\n- measure /execute overhead\n", encoding="utf-8"
        )
        (files / "cities.csv").write_text(
            "city,country,timezone\nTokyo,Japan,Asia/Tokyo\nParis,France,Europe/Paris\n"
            "New York,United States,America/New_York\n",
            encoding="utf-8",
        )
    repo = folder / "repo"
    if (repo / ".git").exists() or shutil.which("git") is None:
        return
    repo.mkdir(parents=True, exist_ok=True)

    def git(*args: str) -> None:
        subprocess.run(
            [
                "git",
                "-c",
                "user.name=Toolscout Demo",
                "-c",
                "user.email=demo@toolscout.invalid",
                "-c",
                "init.defaultBranch=main",
                *args,
            ],
            cwd=repo,
            check=True,
            capture_output=True,
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
    handle = await anyio.to_thread.run_sync(_lock, folder)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _lock(folder: Path) -> TextIO:
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / ".lock", "w")  # noqa: SIM115 - closed by _locked
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


async def _run(command: list[str], what: str, limit_seconds: float = 900) -> None:
    logger.info("%s: %s", what, " ".join(command))
    with anyio.fail_after(limit_seconds):
        result = await anyio.run_process(command, check=False)
    if result.returncode != 0:
        output = (result.stderr or result.stdout or b"").decode(errors="replace").strip().splitlines()
        raise ToolchainError(f"{what} failed (exit {result.returncode}): {' | '.join(output[-5:])}")


def _importable(modules: Iterable[str]) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


async def ensure_python_packages(folder: Path, packages: list[str], modules: list[str]) -> str:
    """The interpreter that runs these PyPI servers: this one when it can import them, else a virtual
    environment under `folder/python`, created and filled with pip on first use (a marker file records what
    was installed, so later starts check nothing but that file)."""
    if _importable(modules):
        return sys.executable
    python = folder / "python" / "bin" / "python"
    marker = folder / "python" / ".toolscout-packages"
    wanted = "\n".join(sorted(packages))
    if python.exists() and marker.exists() and marker.read_text(encoding="utf-8") == wanted:
        return str(python)
    async with _locked(folder):
        if python.exists() and marker.exists() and marker.read_text(encoding="utf-8") == wanted:
            return str(python)
        check = [str(python), "-c", "import " + ", ".join(modules)]
        if not (python.exists() and (await anyio.run_process(check, check=False)).returncode == 0):
            logger.warning(
                "installing the demo MCP servers from PyPI into %s (first start only)", python.parent.parent
            )
            if not python.exists():
                await _run(
                    [sys.executable, "-m", "venv", str(folder / "python")], "creating the servers' venv"
                )
            await _run(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
                "pip install " + " ".join(packages),
            )
        marker.write_text(wanted, encoding="utf-8")
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
            await _run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(prefix),
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    *missing,
                ],
                "npm install " + " ".join(missing),
            )
    return modules


def node_entry(node_modules: Path, package: str) -> Path:
    """The script a package's `bin` names (what `npx package` would run)."""
    text = (node_modules / package / "package.json").read_text(encoding="utf-8")
    manifest: dict[str, Any] = json.loads(text)
    binary = manifest.get("bin")
    if isinstance(binary, dict):
        binary = next(iter(binary.values()), None)
    if not isinstance(binary, str):
        binary = str(manifest.get("main", "dist/index.js"))
    return (node_modules / package / binary).resolve()


__all__ = [
    "NODE_DEMO",
    "PYTHON_DEMO",
    "ToolchainError",
    "create_demo_data",
    "default_toolchain_dir",
    "demo_servers",
    "ensure_node_packages",
    "ensure_python_packages",
    "node_available",
    "node_entry",
    "prepare_demo_server",
    "toolchain_dir",
]
