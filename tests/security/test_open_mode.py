"""Closed unless it is safe to be open: no keys means a local admin only on loopback, and keys come from the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.db.models import ApiKey
from service.security.openmode import StartupRefused
from tests.processes import free_port
from tests.security.conftest import assert_problem, bearer, cli_key, count_rows, make_settings, running

REPO = Path(__file__).resolve().parents[2]


def toolscout() -> list[str]:
    script = Path(sys.executable).with_name("toolscout")
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


def test_serve_on_all_interfaces_without_a_key_refuses_to_start(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TOOLSCOUT_DATA_DIR": str(tmp_path),
        "TOOLSCOUT_DEMO_CATALOG": "false",
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [*toolscout(), "serve", "--host", "0.0.0.0", "--port", str(free_port())],  # 0 is refused as no port
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "Refusing to start" in output and "toolscout keys create" in output
    assert "Application startup complete" not in output


async def test_app_bound_beyond_loopback_without_key_refuses_and_creates_nothing(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None)
    settings.host = "0.0.0.0"
    with pytest.raises(StartupRefused, match="toolscout keys create"):
        async with running(settings):
            raise AssertionError("the service must not serve")
    # Nothing was created on the way: start it on loopback and look.
    settings.host = "127.0.0.1"
    async with running(settings) as (app, _http):
        assert await count_rows(app, ApiKey) == 0


async def test_bound_beyond_loopback_with_a_key_serves_only_keyed_requests(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None)
    async with running(settings) as (app, _http):
        admin = await cli_key(app, "root", ["admin"])
    settings.host = "0.0.0.0"
    async with running(settings, host="10.1.2.3:8765") as (app, http):
        assert_problem(await http.get("/tools"), 401, "unauthorized")
        assert (await http.get("/tools", headers=bearer(admin))).status_code == 200


async def test_post_keys_in_open_mode_cannot_take_the_service(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        body = assert_problem(await http.post("/keys", json={"caller": "intruder", "roles": ["admin"]}), 403)
        assert "toolscout keys create" in body["detail"]
        assert await count_rows(app, ApiKey) == 0
        # The operator is not locked out: the service is still open to its local user.
        assert (await http.post("/search", json={"query": "anything"})).status_code == 200


async def test_post_keys_with_a_non_admin_key_is_refused(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (app, http):
        user = await cli_key(app, "user", [])
        assert_problem(await http.post("/keys", json={"caller": "x", "roles": ["admin"]}, headers=bearer(user)), 403)
        assert await count_rows(app, ApiKey) == 1


async def test_open_mode_off_refuses_every_request(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None, policy={"open_without_keys": False})
    async with running(settings) as (app, http):
        assert_problem(await http.post("/search", json={"query": "x"}), 401, "unauthorized")
        assert_problem(await http.post("/tools", json={"tools": []}), 401, "unauthorized")
        assert await count_rows(app, ApiKey) == 0


def test_docker_compose_runs_with_keys() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    api = services["api"]
    environment = api.get("environment") or {}
    # Bound to 0.0.0.0, the replicas need keys; a one-shot service creates the first admin key with the CLI.
    assert str(environment.get("TOOLSCOUT_POLICY__OPEN_WITHOUT_KEYS", "")).lower() == "false"
    assert environment.get("TOOLSCOUT_POLICY__ALLOWED_HOSTS"), "replicas behind a name need their allowed hosts"
    creators = [
        name
        for name, s in services.items()
        if "keys" in str(s.get("command", "")) and "create" in str(s.get("command", ""))
    ]
    assert creators, "no service creates the first key"
    assert api["depends_on"][creators[0]]["condition"] == "service_completed_successfully"
