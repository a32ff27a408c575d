"""One error shape, always: problem+json with an error id for the unexpected, 503 + Retry-After when the index or
the database is down, and never a text/plain 500."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from indexer.embedding import HashingEmbedder
from service.db.models import ApiKey, Execution
from service.execution.runtime import get_gateway
from service.main import create_app
from tests.conftest import POSTGRES_ADMIN_URL
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running


async def test_an_unexpected_error_is_a_500_problem_with_an_error_id_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import httpx

    app = create_app(make_settings(tmp_path, permissions=None), embedder=HashingEmbedder())

    async def broken() -> dict[str, str]:
        raise RuntimeError("internal detail: password=hunter2")

    app.add_api_route("/broken", broken)
    caplog.set_level(logging.ERROR)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as http:
            response = await http.get("/broken")
    body = assert_problem(response, 500, "internal")
    assert "hunter2" not in response.text and "RuntimeError" not in response.text
    assert len(body["error_id"]) == 32 and body["error_id"] in body["detail"]
    logged = [r for r in caplog.records if body["error_id"] in r.getMessage()]
    assert logged and logged[0].exc_info is not None  # the stack trace is in the log, not in the body


async def test_index_failure_is_503_with_retry_after(world: dict[str, Any]) -> None:
    http, admin, app = world["http"], world["admin"], world["app"]
    resources = app.state.resources
    resources.index.close()  # the engine goes away under the running service
    response = await http.post("/search", json={"query": "weather"}, headers=bearer(admin))
    assert_problem(response, 503, "index-unavailable")
    assert int(response.headers["retry-after"]) >= 1
    ready = await http.get("/readyz")
    assert ready.status_code == 503 and ready.json()["status"] == "not ready"
    assert ready.json()["checks"]["index"].startswith("error")
    resources.index = None  # already closed: keep the shutdown from closing it twice


@pytest.mark.postgres
async def test_database_failure_is_503_with_retry_after(tmp_path: Path, postgres_url: str) -> None:
    settings = make_settings(tmp_path, permissions=None)
    settings.db.url = postgres_url
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        assert (await http.get("/tools", headers=bearer(admin))).status_code == 200
        name = postgres_url.rsplit("/", 1)[1]
        engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        engine.dispose()
        response = await http.get("/tools", headers=bearer(admin))
        assert_problem(response, 503, "database-unavailable")
        assert int(response.headers["retry-after"]) >= 1


async def test_post_keys_with_a_blank_caller_is_422_and_writes_nothing(world: dict[str, Any]) -> None:
    http, admin, app = world["http"], world["admin"], world["app"]
    before = await count_rows(app, ApiKey)
    for caller in ("   ", "\t"):
        body = assert_problem(await http.post("/keys", json={"caller": caller}, headers=bearer(admin)), 422)
        assert body["errors"][0]["pointer"] == "/body/caller"
    assert await count_rows(app, ApiKey) == before


async def test_a_bug_in_one_batch_call_neither_fails_nor_orphans_the_others(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    http, admin, app = world["http"], world["admin"], world["app"]
    import service.execution.executor as execution

    original = execution.find_tool

    async def find_tool(session: Any, name: str, *args: Any) -> Any:
        if name == "public__boom":
            raise KeyError("a bug in the execute path")
        return await original(session, name, *args)

    monkeypatch.setattr(execution, "find_tool", find_tool)
    calls = {"calls": [{"name": "public__boom"}, {"name": "public__get_weather"}, {"name": "none__missing"}]}
    response = await http.post("/execute/batch", json=calls, headers=bearer(admin))
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    items = response.json()["results"]
    assert [i["status"] for i in items] == [500, 502, 404]
    assert items[0]["error"]["error_id"] and "KeyError" not in response.text
    await get_gateway(app.state.resources).log.flush()
    assert await count_rows(app, Execution) == 3  # every sibling finished and was logged


async def test_post_keys_refuses_roles_that_cannot_name_a_scope(world: dict[str, Any]) -> None:
    """A key's sorted roles joined by commas are the scope its searches are logged and learned in. On PostgreSQL a
    key with a 600-character role lost every search from the log (20 of 20, each an ERROR quoting the SQL; the
    column holds 512), and the role 'dev,approver' had the scope of a key with the roles dev and approver."""
    http, admin, app = world["http"], world["admin"], world["app"]
    before = await count_rows(app, ApiKey)
    for roles, pointer in (
        (["dev", "r" * 65], "/body/roles/1"),
        (["dev,approver"], "/body/roles/0"),
        ([" "], "/body/roles/0"),
        (["line\nbreak"], "/body/roles/0"),
        ([f"role{i:02d}{'x' * 56}" for i in range(9)], "/body/roles"),
    ):
        body = assert_problem(
            await http.post("/keys", json={"caller": "c", "roles": roles}, headers=bearer(admin)), 422
        )
        assert body["errors"][0]["pointer"] == pointer, roles
    assert await count_rows(app, ApiKey) == before
    created = await http.post("/keys", json={"caller": "c", "roles": ["dev", "approver", "dev"]}, headers=bearer(admin))
    assert created.status_code == 201 and created.json()["roles"] == ["approver", "dev"]
