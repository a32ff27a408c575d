"""Fixtures for tests with real upstream MCP servers (helpers in upstream_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from upstream_support import HttpServer


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    """The test server over streamable HTTP on a free local port."""
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()
