"""Fixtures of the execution tests that run real PyPI and npm MCP servers: the same shared installs as the
fixtures of tests/upstream (installed on first use)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.upstream.demo import (
    NODE_DEMO,
    PYTHON_DEMO,
    ensure_node_packages,
    ensure_python_packages,
    node_available,
)
from tests.upstream.upstream_support import toolchain_path


@pytest.fixture(scope="session")
async def python_servers() -> str:
    """An interpreter running mcp-server-time, -git and -fetch."""
    return await ensure_python_packages(
        toolchain_path(), [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )


@pytest.fixture(scope="session")
async def node_modules() -> Path:
    """node_modules with server-memory, server-filesystem and server-everything."""
    if not node_available():
        pytest.skip("Node.js and npm are not installed")
    return await ensure_node_packages(toolchain_path(), list(NODE_DEMO.values()))
