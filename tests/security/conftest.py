"""The security suite's world: a real app (fast embedder, lifespan run) with a permissions file, tools of four
servers, and keys for an admin, a restricted developer and an approver. Each test attacks through the REST API
and checks both the refusal and that nothing happened."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import event, func, select

from indexer.embedding import HashingEmbedder
from service.main import create_app
from service.policy import keys as auth
from service.resources import Resources
from service.settings import Settings
from tests.processes import free_port
from tests.security.egress_support import Recorder

TEST_SERVER = Path(__file__).resolve().parents[1] / "upstream" / "mcp_test_server.py"
PROBLEM_JSON = "application/problem+json"

PERMISSIONS = """
roles:
  dev:
    allow: ["server:public", "server:util"]
    deny: ["*delete*"]
approver_roles: [approver]
destructive: ["util__purge_*"]
"""

TOOLS = [
    {"server": "public", "name": "get_weather", "description": "Weather forecast for a city"},
    {"server": "public", "name": "delete_account", "description": "Delete a user account for good"},
    {"server": "util", "name": "purge_cache", "description": "Purge the cache of a service"},
    {"server": "vault", "name": "get_secret", "description": "Read a secret from the vault"},
    {"server": "vault", "name": "list_secrets", "description": "List the secrets in the vault"},
    {"server": "payroll", "name": "get_salary", "description": "Read the salary of an employee"},
]
FORBIDDEN_FOR_DEV = {"public__delete_account", "vault__get_secret", "vault__list_secrets", "payroll__get_salary"}
FORBIDDEN_SERVERS_FOR_DEV = {"vault", "payroll"}


def make_settings(tmp_path: Path, permissions: str | None = PERMISSIONS, **sections: dict[str, Any]) -> Settings:
    """Settings under tmp_path: no demo catalog or servers, refresh lag off, the permissions file."""
    settings = Settings(data_dir=tmp_path, demo_catalog=False)
    settings.execution.demo_servers = False
    settings.learning.refresh_lag_seconds = 0.0
    if permissions is not None:
        path = tmp_path / "permissions.yaml"
        path.write_text(permissions)
        settings.policy.permissions_file = path
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(settings, section), key, value)
    return settings


def servers_file(tmp_path: Path, servers: dict[str, Any]) -> Path:
    """A servers file (trusted configuration) with these `mcpServers` entries."""
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def probe_entry(**extra: Any) -> dict[str, Any]:
    """The real test MCP server over stdio."""
    return {"command": sys.executable, "args": [str(TEST_SERVER), "stdio"], **extra}


@asynccontextmanager
async def running(settings: Settings, host: str = "localhost") -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with its lifespan run, and a client of it that sends `Host: <host>`."""
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}", timeout=60) as http:
            yield app, http


async def cli_key(app: FastAPI, caller: str, roles: list[str]) -> str:
    """A key created the CLI's way (`toolscout keys create`), straight into the database."""
    resources: Resources = app.state.resources
    async with resources.session() as session:
        created = await auth.create_key(session, caller, roles)
        await session.commit()
    auth.key_resolver(resources).invalidate()
    return created.key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(response: httpx.Response, status: int, slug: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem of this status (and type slug); returns its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["title"] and body["detail"]
    if slug is not None:
        assert body["type"].endswith("/" + slug), body
    assert "Traceback" not in response.text
    return body


async def count_rows(app: FastAPI, model: Any) -> int:
    """How many rows a table holds."""
    resources: Resources = app.state.resources
    async with resources.session() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


@asynccontextmanager
async def opened_world(tmp_path: Path, **sections: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The app with the permissions file and the tools, and keys for admin, dev and approver; `sections` as
    for `make_settings` (e.g. another index backend)."""
    async with running(make_settings(tmp_path, **sections)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        response = await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))
        assert response.status_code == 200, response.text
        dev = await cli_key(app, "dev-agent", ["dev"])
        approver = await cli_key(app, "lead", ["approver"])
        yield {"app": app, "http": http, "admin": admin, "dev": dev, "approver": approver, "tmp_path": tmp_path}


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The app with the permissions file and the tools, and keys for admin, dev and approver."""
    async with opened_world(tmp_path) as opened:
        yield opened


@contextmanager
def statements(app: FastAPI, matching: Callable[[str], bool]) -> Iterator[list[str]]:
    """The SQL statements the app sends while the block runs that `matching` accepts (a query the block must not
    cost shows up here)."""
    seen: list[str] = []
    engine = app.state.resources.engine.sync_engine

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if matching(statement):
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve an app whose lifespan already runs (see `running`) with uvicorn on a free loopback port: streams
    need a real server."""
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        with anyio.fail_after(60):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped before serving")
                await anyio.sleep(0.02)
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        with anyio.fail_after(60):
            await task


@pytest.fixture
def internal() -> Iterator[Recorder]:
    """An HTTP service on loopback recording what reaches it (the egress proxy's tests)."""
    recorder = Recorder()
    server = recorder.serve()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
