"""docker-compose.yml against the Compose specification schema, and the properties a team relies on.

The schema is tests/fixtures/compose-spec.json: the Compose specification's `compose-spec.json` as shipped by
the npm package dclint 3.1.0 (`schemas/compose.schema.json`, MIT), vendored because `docker compose config`
and the internet are not available here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "compose-spec.json"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_file_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert [f"{list(e.path)}: {e.message}" for e in errors] == []


def test_the_schema_rejects_what_compose_rejects() -> None:
    schema = json.loads(SCHEMA.read_text())
    broken = {"services": {"api": {"image": "x", "deploy": {"replicas": "three"}, "unknown_key": 1}}}
    messages = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(broken)]
    assert any("unknown_key" in m for m in messages)


def test_three_api_replicas_behind_a_load_balancer(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["api"]["deploy"]["replicas"] == 3
    assert "ports" not in services["api"]  # only the balancer is published
    assert services["lb"]["ports"] == ["8765:80"]
    assert "server api:8765" in compose["configs"]["nginx"]["content"]
    assert set(services) == {"api", "init-key", "lb", "postgres", "redis", "qdrant"}


def test_replicas_share_state_through_services_and_only_the_spill_folder_on_disk(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    env = api["environment"]
    # A replica recreated during a database outage left its spilled calls in a data folder nobody read again.
    assert api["volumes"] == [f"spill:{env['TOOLSCOUT_DB__SPILL_DIR']}"] and "spill" in compose["volumes"]
    assert not env["TOOLSCOUT_DATA_DIR"].startswith(env["TOOLSCOUT_DB__SPILL_DIR"])
    assert env["TOOLSCOUT_CLUSTER__REDIS_URL"].startswith("redis://redis:")
    assert env["TOOLSCOUT_DB__URL"].startswith("postgresql+psycopg://")
    assert env["TOOLSCOUT_INDEX__BACKEND"] == "qdrant"
    assert env["TOOLSCOUT_POLICY__OPEN_WITHOUT_KEYS"] == "false"
    assert env["TOOLSCOUT_EXECUTION__DEMO_SERVERS"] == "false"
    conditions = {name: dep["condition"] for name, dep in api["depends_on"].items()}
    assert conditions == {
        "postgres": "service_healthy",
        "redis": "service_healthy",
        "qdrant": "service_healthy",
        "init-key": "service_completed_successfully",  # the first admin key exists before any replica serves
    }


def test_qdrant_needs_a_key_and_every_backing_service_has_a_health_check(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "QDRANT_API_KEY" in services["qdrant"]["environment"]["QDRANT__SERVICE__API_KEY"]
    assert (
        services["api"]["environment"]["TOOLSCOUT_INDEX__API_KEY"]
        == services["qdrant"]["environment"]["QDRANT__SERVICE__API_KEY"]
    )
    for name in ("api", "postgres", "redis", "qdrant"):
        assert services[name]["healthcheck"]["test"], name


def test_the_replicas_see_each_client_address_not_the_balancers(compose: dict[str, Any]) -> None:
    """Wrong keys slow their sender's address: seen as nginx's, six wrong keys from anyone locked every caller out
    (valid keys included) for up to policy.auth_failure_max_delay_seconds. nginx replaces X-Forwarded-For with the
    address it sees, so the first entry is the client's and cannot be forged; the replicas believe it from any peer
    (policy.trusted_proxies; they are reachable only inside the compose network)."""
    assert compose["services"]["api"]["environment"]["TOOLSCOUT_POLICY__TRUSTED_PROXIES"] == '["*"]'
    nginx = compose["configs"]["nginx"]["content"]
    locations = nginx.count("location ")
    assert nginx.count("proxy_set_header X-Forwarded-For $$remote_addr;") == locations
    assert nginx.count("proxy_set_header X-Forwarded-Proto $$scheme;") == locations
    assert "proxy_add_x_forwarded_for" not in nginx


def test_the_image_leaves_out_secrets_local_data_and_environments() -> None:
    # The api image is built with `COPY . .` from this folder, where README (Deploying) puts the .env of secrets.
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    ignored.discard("")
    assert {".env", ".git", ".venv", ".toolscout"} <= ignored
    not_committed = {
        line.strip() for line in (ROOT / ".gitignore").read_text().splitlines() if line.strip() and line[0] != "#"
    }
    # What git leaves out is never the image's either (a pattern may be written for every folder: **/).
    assert {p for p in not_committed if p not in ignored and f"**/{p}" not in ignored} == set()
    assert "COPY . ." in yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["api"]["build"][
        "dockerfile_inline"
    ]
