"""A service with a permissions file, registered tools and keys: shared by the policy tests over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from indexer.embedding import HashingEmbedder
from service.main import create_app
from service.policy import keys
from service.settings import Settings

PERMISSIONS = """
roles:
  dev:
    allow: ["server:public", "util__*", "vault__*"]
    deny: ["*delete*", "server:vault"]
  ops:
    allow: ["*"]
approver_roles: [approver]
destructive: ["util__purge_*"]
"""

TOOLS = [
    {"server": "public", "name": "get_weather", "description": "Weather forecast for a city"},
    {"server": "public", "name": "delete_account", "description": "Delete a user account for good"},
    {"server": "util", "name": "format_date", "description": "Format a date"},
    {"server": "util", "name": "purge_cache", "description": "Purge the cache"},
    {
        "server": "util",
        "name": "drop_table",
        "description": "Drop a database table",
        "annotations": {"destructiveHint": True},
    },
    {"server": "vault", "name": "get_secret", "description": "Read a secret from the vault"},
    {"server": "vault", "name": "list_secrets", "description": "List the secrets in the vault"},
    {"server": "payroll", "name": "get_salary", "description": "Read the salary of an employee"},
]
FORBIDDEN_FOR_DEV = {
    "public__delete_account",
    "vault__get_secret",
    "vault__list_secrets",
    "payroll__get_salary",
}
VISIBLE_TO_DEV = {"public__get_weather", "util__format_date", "util__purge_cache", "util__drop_table"}


def make_settings(tmp_path: Path, permissions: str | None = PERMISSIONS, **policy: Any) -> Settings:
    settings = Settings(data_dir=tmp_path, demo_catalog=False)
    settings.execution.demo_servers = False
    settings.learning.refresh_lag_seconds = 0.0
    if permissions is not None:
        path = tmp_path / "permissions.yaml"
        path.write_text(permissions)
        settings.policy.permissions_file = path
    for key, value in policy.items():
        setattr(settings.policy, key, value)
    return settings


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield app, http


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def first_key(app: FastAPI, caller: str, roles: list[str]) -> str:
    """A key made the CLI's way (`toolscout keys create`): POST /keys always needs an admin key (issue 9)."""
    resources = app.state.resources
    async with resources.session() as session:
        created = await keys.create_key(session, caller, roles)
        await session.commit()
    keys.key_resolver(resources).invalidate()
    return created.key


async def make_key(http: httpx.AsyncClient, caller: str, roles: list[str], admin: str | None = None) -> str:
    response = await http.post("/keys", json={"caller": caller, "roles": roles}, headers=bearer(admin) if admin else {})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["key"].startswith("tsk_") and body["caller"] == caller and body["roles"] == sorted(roles)
    return str(body["key"])
