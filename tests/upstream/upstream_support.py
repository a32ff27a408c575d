"""Helpers for tests with real upstream MCP servers: where the PyPI and npm servers' toolchain is (installed
on first use, shared through ~/.cache/toolscout/upstream or $TOOLSCOUT_TEST_TOOLCHAIN), `mcpServers` entries,
the in-repo test server over streamable HTTP, and an app running with a given configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from indexer.embedding import HashingEmbedder
from service.main import create_app
from service.settings import DatabaseSettings, ExecutionSettings, PolicySettings, Settings
from service.upstream.demo import (
    NODE_DEMO,
    default_toolchain_dir,
    node_entry,
)
from tests.processes import free_port, wait_for_port

TEST_SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"


def toolchain_path() -> Path:
    return Path(os.environ.get("TOOLSCOUT_TEST_TOOLCHAIN") or default_toolchain_dir())


def node_server(node_modules: Path, key: str, *args: str, **extra: Any) -> dict[str, Any]:
    """An mcpServers entry running an npm server with node directly."""
    return {"command": "node", "args": [str(node_entry(node_modules, NODE_DEMO[key])), *args], **extra}


def local_server(*args: str, **extra: Any) -> dict[str, Any]:
    """An mcpServers entry running tests/upstream/mcp_test_server.py."""
    return {"command": sys.executable, "args": [str(TEST_SERVER), *args], **extra}


class HttpServer:
    """The test server over streamable HTTP in a child process; can be killed and started again."""

    def __init__(self, *host_names: str) -> None:
        self.port = free_port()
        self.host_names = host_names  # Host header names it accepts beside its loopback names
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(TEST_SERVER), "http", str(self.port), *self.host_names],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, self.process, 20, "the streamable HTTP test server")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@asynccontextmanager
async def running(
    tmp_path: Path, servers: dict[str, Any] | None = None, *, demo: bool = False, **execution: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with these upstream servers (or the demo set), its lifespan run; start-up waits for them."""
    options: dict[str, Any] = {
        "demo_servers": demo,
        "startup_wait_seconds": 120,
        "toolchain_dir": toolchain_path(),
    }
    if servers is not None:
        servers_file = tmp_path / "servers.json"
        servers_file.write_text(json.dumps({"mcpServers": servers}))
        options["servers_file"] = servers_file
    settings = Settings(
        data_dir=tmp_path,
        demo_catalog=False,
        db=DatabaseSettings(url=None),
        policy=PolicySettings(rate_limit_per_minute=0),
        execution=ExecutionSettings(**(options | execution)),
    )
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=120) as client:
            yield app, client
