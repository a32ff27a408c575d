"""Fixtures for tests with real upstream MCP servers (helpers in upstream_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from upstream_support import HttpServer, toolchain_path

from service.upstream.demo import (
    NODE_DEMO,
    PYTHON_DEMO,
    ensure_node_packages,
    ensure_python_packages,
    node_available,
)


@pytest.fixture(scope="session")
async def python_servers() -> str:
    """An interpreter running mcp-server-time, -git and -fetch (installed on first use)."""
    return await ensure_python_packages(
        toolchain_path(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )


@pytest.fixture(scope="session")
async def node_modules() -> Path:
    """node_modules with server-memory, server-filesystem and server-everything (installed on first use)."""
    if not node_available():
        pytest.skip("Node.js and npm are not installed")
    return await ensure_node_packages(toolchain_path(), list(NODE_DEMO.values()))


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    """The test server over streamable HTTP on a free local port."""
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()
