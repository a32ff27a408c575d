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
        (
            "TOOLSCOUT_POLICY__OPEN_WITHOUT_KEY",
            "true",
            "TOOLSCOUT_POLICY__OPEN_WITHOUT_KEY: no such setting (did you mean TOOLSCOUT_POLICY__OPEN_WITHOUT_KEYS?)",
        ),
        ("TOOLSCOUT_SEARCH__ZZZ", "1", "TOOLSCOUT_SEARCH__ZZZ: no such setting\n"),
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
            "TOOLSCOUT_POLICY__TRUSTED_PROXIES: 'nginx' is not an IP address, a network (10.0.0.0/8) or *",
        ),
        (
            "TOOLSCOUT_POLICY__RATE_LIMIT_BURST",
            "0",
            "TOOLSCOUT_POLICY__RATE_LIMIT_BURST: Input should be greater than or equal to 1 (given: '0')",
        ),
        (
            "TOOLSCOUT_EXECUTION__TIMEOUT_SECONDS",
            "-1",
            "TOOLSCOUT_EXECUTION__TIMEOUT_SECONDS: Input should be greater than 0 (given: '-1')",
        ),
        (
            "TOOLSCOUT_FRONTEND__HTTP_PATH",
            "mcp",
            "TOOLSCOUT_FRONTEND__HTTP_PATH: a path starts with /, such as /mcp (given: 'mcp')",
        ),
        (
            "TOOLSCOUT_FRONTEND__API_URL",
            "127.0.0.1:8765",
            "TOOLSCOUT_FRONTEND__API_URL: expected an http:// or https:// URL, such as http://127.0.0.1:8765 "
            "(given: '127.0.0.1:8765')",
        ),
        (
            "TOOLSCOUT_LOG_LEVEL",
            "verbose",
            "TOOLSCOUT_LOG_LEVEL: not a log level: expected one of debug, info, warning, error, critical "
            "(given: 'verbose')",
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
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # configured, never started
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.WARNING)  # restored afterwards
    assert main([*argv, "serve", "--port", "9"]) == 3  # uvicorn's status of a start that did not happen
    assert root.level == level


@pytest.mark.parametrize(
    "variable",
    [
        "TOOLSCOUT_POLICY__CORS_ORIGINS",
        "TOOLSCOUT_POLICY__ALLOWED_HOSTS",
        "TOOLSCOUT_POLICY__TRUSTED_PROXIES",
        "TOOLSCOUT_EXECUTION__API_STDIO_COMMANDS",
        "TOOLSCOUT_EXECUTION__API_STDIO_ENV",
        "TOOLSCOUT_EXECUTION__UPSTREAM_ALLOWED_HOSTS",
    ],
)
def test_a_list_setting_given_a_bare_value_names_its_variable_and_the_json_form(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str
) -> None:
    monkeypatch.setenv(variable, "foo")
    assert main(["search", "anything"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "Invalid settings (environment or .env):",
        f"  {variable}: expected JSON, such as {variable}='[\"a\", \"b\"]' (given: 'foo')",
    ]


def test_a_list_setting_given_a_bare_value_in_the_env_file_is_named_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("TOOLSCOUT_POLICY__CORS_ORIGINS=https://app.example\n")
    assert main(["search", "anything"]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == [
        "  TOOLSCOUT_POLICY__CORS_ORIGINS: expected JSON, such as "
        "TOOLSCOUT_POLICY__CORS_ORIGINS='[\"a\", \"b\"]' (given: 'https://app.example')"
    ]


def test_a_list_setting_given_as_json_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSCOUT_POLICY__CORS_ORIGINS", '["https://app.example"]')
    assert Settings().policy.cors_origins == ["https://app.example"]


EXPECTED_URL = "expected sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("nonsense://x", f"'nonsense' is not a database Toolscout runs on ({EXPECTED_URL}) (given: 'nonsense://x')"),
        ("nonsense", f"not a database URL ({EXPECTED_URL}) (given: 'nonsense')"),
        # The password of a URL is never printed.
        (
            "mysql://app:s3cret@db/x",
            f"'mysql' is not a database Toolscout runs on ({EXPECTED_URL}) (given: 'mysql://app:***@db/x')",
        ),
    ],
)
def test_a_database_url_the_service_cannot_open_stops_it_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str, line: str
) -> None:
    monkeypatch.setenv("TOOLSCOUT_DB__URL", value)
    assert main(["search", "anything"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "Invalid settings (environment or .env):",
        f"  TOOLSCOUT_DB__URL: {line}",
    ]


@pytest.mark.parametrize(
    "url", ["sqlite:///data/x.db", "sqlite+aiosqlite:///x.db", "postgresql://u@h/d", "postgresql+psycopg://u:p@h:1/d"]
)
def test_sqlite_and_postgresql_urls_are_taken(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("TOOLSCOUT_DB__URL", url)
    assert Settings().database_url == url


def test_an_empty_database_url_keeps_sqlite_in_the_data_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOOLSCOUT_DB__URL", "")
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    assert Settings().database_url == f"sqlite:///{tmp_path.resolve() / 'toolscout.db'}"


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("TOOLSCOUT_PORT", "0", "Input should be greater than or equal to 1"),
        ("TOOLSCOUT_PORT", "65536", "Input should be less than or equal to 65535"),
        ("TOOLSCOUT_FRONTEND__HTTP_PORT", "-1", "Input should be greater than or equal to 1"),
        ("TOOLSCOUT_FRONTEND__HTTP_PORT", "70000", "Input should be less than or equal to 65535"),
        ("TOOLSCOUT_SEARCH__DEFAULT_K", "0", "must be from 1 to max_k (50)"),
        ("TOOLSCOUT_SEARCH__DEFAULT_K", "51", "must be from 1 to max_k (50)"),
        ("TOOLSCOUT_SEARCH__MAX_K", "0", "Input should be greater than or equal to 1"),
    ],
)
def test_ports_and_default_k_out_of_range_stop_serve(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    variable: str,
    value: str,
    reason: str,
) -> None:
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv(variable, value)
    assert main(["serve"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "Invalid settings (environment or .env):",
        f"  {variable}: {reason} (given: {value!r})",
    ]
    assert not (tmp_path / "toolscout.db").exists()  # refused before anything started


def test_default_k_may_be_raised_with_max_k(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSCOUT_SEARCH__MAX_K", "100")
    monkeypatch.setenv("TOOLSCOUT_SEARCH__DEFAULT_K", "60")
    assert (Settings().search.max_k, Settings().search.default_k) == (100, 60)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--port", "0"], "toolscout serve: error: argument --port: 0 is not a port from 1 to 65535"),
        (["mcp", "--port", "99999"], "toolscout mcp: error: argument --port: 99999 is not a port from 1 to 65535"),
        (["serve", "--port", "http"], "toolscout serve: error: argument --port: not a port number: 'http'"),
    ],
)
def test_a_port_out_of_range_on_the_command_line_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    command = message.split(":")[0]
    assert capsys.readouterr().err.splitlines() == [f"{message} (see `{command} --help`)"]


def test_a_list_setting_holding_a_url_with_a_password_never_prints_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLSCOUT_POLICY__CORS_ORIGINS", "https://admin:hunter2@app.example")
    assert main(["search", "anything"]) == 2
    err = capsys.readouterr().err
    assert "(given: 'https://admin:***@app.example')" in err and "hunter2" not in err


def test_a_log_level_option_that_is_no_level_is_a_usage_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--log-level", "verbose", "keys", "list"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert err == (
        "toolscout: error: argument --log-level: not a log level: expected one of debug, info, warning, error, "
        "critical, got 'verbose' (see `toolscout --help`)\n"
    )


def test_a_log_level_is_taken_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSCOUT_LOG_LEVEL", "debug")
    assert Settings().log_level == "DEBUG"
