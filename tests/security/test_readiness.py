"""/readyz answers anyone (no key): it says which check or background loop fails and of what kind of error, never
the error's text (addresses, database names, SQL and its parameters); that is in the log."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from sqlalchemy import create_engine, text

from service.usage.learning import REFRESH_TASK, request_refresh
from tests.conftest import POSTGRES_ADMIN_URL
from tests.security.conftest import cli_key, make_settings, running

NO_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.mark.postgres
async def test_a_failing_loop_and_redis_are_named_without_their_error_text(tmp_path: Path, postgres_url: str) -> None:
    """Measured before: with the database gone and Redis unreachable, an anonymous GET /readyz quoted
    `OperationalError: (psycopg.OperationalError) connection failed: connection to server at "127.0.0.1", port 5432
    failed: FATAL: database "..." does not exist` for the statistics loop, and Redis's error with its address (a
    SQLAlchemy message also quotes its SQL and parameters)."""
    settings = make_settings(
        tmp_path,
        db={"url": postgres_url},
        cluster={"redis_url": NO_REDIS, "redis_timeout_seconds": 0.2},
        learning={"refresh_seconds": 3600.0},
    )
    name = postgres_url.rsplit("/", 1)[1]
    async with running(settings) as (app, http):
        await cli_key(app, "root", ["admin"])
        engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        engine.dispose()
        supervisor = app.state.resources.supervisor
        request_refresh(app.state.resources)
        with anyio.fail_after(30):
            while supervisor.status[REFRESH_TASK].last_error is None:  # noqa: ASYNC110 - no event to wait on
                await anyio.sleep(0.05)
        ready = await http.get("/readyz")
    body = ready.json()
    assert ready.status_code == 503 and body["checks"]["database"] == "error: OperationalError"
    failed = body["background"][REFRESH_TASK]
    assert failed["state"] == "backoff" and failed["last_error"] == "OperationalError", failed
    assert body["checks"]["redis"].startswith("degraded: ConnectionError "), body["checks"]
    quoted = json.dumps(body)
    for secret in (name, "5432", "127.0.0.1", ":1.", "SELECT", "[SQL", "does not exist"):
        assert secret not in quoted, (secret, body)
