"""Settings from the environment: a typo is an error naming the variable, never a silent default."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.cli import main
from service.settings import Settings


def test_a_known_setting_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSCOUT_POLICY__OPEN_WITHOUT_KEYS", "false")
    monkeypatch.setenv("TOOLSCOUT_SEARCH__DEFAULT_K", "7")
    settings = Settings()
    assert settings.policy.open_without_keys is False and settings.search.default_k == 7


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TOOLSCOUT_POLICY__OPEN_WITHOUT_KEY", "true", "TOOLSCOUT_POLICY__OPEN_WITHOUT_KEY: no such setting"),
        (
            "TOOLSCOUT_POLCY__OPEN_WITHOUT_KEYS",
            "true",
            "TOOLSCOUT_POLCY__OPEN_WITHOUT_KEYS: no settings section 'polcy'",
        ),
        (
            "TOOLSCOUT_SEARCH__DEFAULT_K",
            "five",
            "TOOLSCOUT_SEARCH__DEFAULT_K: Input should be a valid integer, unable to parse string as an integer "
            "(given: 'five')",
        ),
        (
            "TOOLSCOUT_POLICY__TRUSTED_PROXIES",
            '["10.0.0.1", "nginx"]',
            "TOOLSCOUT_POLICY__TRUSTED_PROXIES: Value error, 'nginx' is not an IP address, a network (10.0.0.0/8) or *",
        ),
    ],
)
def test_a_misspelt_or_invalid_setting_stops_the_command_with_its_variable_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError):
        Settings()
    assert main(["search", "anything"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Invalid settings (environment or .env):\n") and message in err
    assert "Traceback" not in err


def test_an_unknown_section_in_the_env_file_is_named_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("TOOLSCOUT_POLCY__OPEN_WITHOUT_KEYS=false\n")
    assert main(["search", "anything"]) == 2
    assert "TOOLSCOUT_POLCY__OPEN_WITHOUT_KEYS: no settings section 'polcy'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "level"), [([], logging.DEBUG), (["--log-level", "ERROR"], logging.ERROR)])
def test_serve_logs_at_the_level_of_toolscout_log_level_unless_the_command_line_says_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], level: int
) -> None:
    """TOOLSCOUT_LOG_LEVEL (.env.example) is the service's level, not only uvicorn's."""
    import uvicorn

    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_LOG_LEVEL", "DEBUG")
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)  # configured, never started
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.WARNING)  # restored afterwards
    assert main([*argv, "serve", "--port", "9"]) == 3  # uvicorn's status of a start that did not happen
    assert root.level == level
