"""The files that name settings outside settings.py: .env.example (README: "lists them all") and the API
environment of docker-compose.yml. A setting added, renamed or removed without them fails here."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import pytest
import yaml

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_env_example_is_what_scripts_env_example_prints() -> None:
    spec = importlib.util.spec_from_file_location("__main__", ROOT / "scripts" / "env_example.py")
    assert spec is not None and spec.loader is not None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    regenerate = "run: python scripts/env_example.py > .env.example"
    assert (ROOT / ".env.example").read_text() == printed.getvalue(), regenerate


def test_every_variable_of_the_compose_api_environment_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    environment = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["x-api-environment"]
    for name, value in environment.items():
        monkeypatch.setenv(name, str(value))
    settings = Settings(_env_file=None)  # a misspelt section variable raises; check the top-level ones by value
    assert settings.index.backend == "qdrant" and settings.index.url == "http://qdrant:6333"
    assert settings.policy.open_without_keys is False and settings.policy.allowed_hosts == ["lb", "api"]
    assert settings.execution.demo_servers is False and settings.demo_catalog is False
    assert str(settings.data_dir) == "/tmp/toolscout" and settings.cluster.redis_url == "redis://redis:6379/0"
    assert str(settings.db.spill_dir) == "/var/lib/toolscout/spill"
    ours = [name for name in environment if name.startswith("TOOLSCOUT_")]
    top_level = {name.removeprefix("TOOLSCOUT_").lower() for name in ours if "__" not in name}
    assert top_level <= set(Settings.model_fields), top_level - set(Settings.model_fields)
    assert settings.policy.trusted_proxies == ["*"]  # the balancer's X-Forwarded-For (README, Deploying)
    assert set(environment) == set(ours)  # uvicorn's own FORWARDED_ALLOW_IPS would be ignored
