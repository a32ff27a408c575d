"""A command imports what it needs, not every command's module: `toolscout search` through the API took 3.5-5 s of
which the search was 15 ms (the benchmarks, analytics and database layers imported to build the parser), and each
chat client waited as long for `toolscout mcp` to start."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import COMMANDS, _command_of, build_parser, main

ROOT = Path(__file__).resolve().parents[1]

# Modules only other commands need: the benchmarks, the analytics' SQL, the database migrations.
OTHERS = ("service.cli.bench", "service.benchmarks", "service.cli.analytics", "service.usage.analytics", "alembic")


def _imported_by(argv: list[str]) -> list[str]:
    """The modules of OTHERS that `toolscout ARGV --help` imports, in a fresh interpreter (as the console script)."""
    script = (
        "import json, sys\n"
        "from service.cli import main\n"
        "try:\n"
        f"    main({argv!r} + ['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted({{m.split('.')[0] if m.startswith('alembic') else m for m in sys.modules}})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(done.stdout.splitlines()[-1])
    return [m for m in loaded if m.startswith(OTHERS)]


@pytest.mark.parametrize("argv", [["search"], ["index"], ["tools", "held"], ["servers", "list"], ["mcp"]])
def test_a_command_imports_no_other_commands_modules(argv: list[str]) -> None:
    assert _imported_by(argv) == []


def test_help_still_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert all(f"    {command} " in out for command in COMMANDS), out


def test_an_unknown_command_lists_every_command_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serach", "what time is it"])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("toolscout: error: no command 'serach' (did you mean search?")
    assert all(f" {command}," in lines[0] or f" {command})" in lines[0] for command in COMMANDS)


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["search", "x"], "search"),
        (["--log-level", "DEBUG", "keys", "list"], "keys"),
        (["--log-level=DEBUG", "mcp"], "mcp"),
        (["--log", "INFO", "servers", "list"], "servers"),  # argparse takes an option's prefix
        (["--", "eval", "--catalog", "c"], "eval"),
        (["--help"], None),
        ([], None),
    ],
)
def test_the_command_is_found_past_the_options_before_it(argv: list[str], command: str | None) -> None:
    assert _command_of(argv) == command


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "read a file", "-k", "3", "--server", "fs", "--explain", "--json"],
        ["--log-level", "DEBUG", "index", "tools.jsonl", "--server", "docs"],
        ["mcp", "--mode", "dynamic", "--transport", "http", "--port", "8766"],
        ["keys", "create", "--caller", "ci", "--role", "admin", "--role", "metrics"],
        ["analytics", "tools", "--days", "7", "--json"],
        ["bench", "search", "--sizes", "1000"],
        ["eval", "--catalog", "c.jsonl", "--queries", "q.jsonl", "--max-queries", "5"],
        ["tools", "approve", "git__git_log"],
        ["servers", "install", "--no-node"],
        ["models", "export"],
        ["serve", "--port", "8791"],
    ],
)
def test_a_command_parses_as_the_whole_command_line_does(argv: list[str]) -> None:
    def parsed(parser: argparse.ArgumentParser) -> dict[str, object]:
        values = vars(parser.parse_args(argv))  # a parser a command keeps for its own errors: compared by its name
        shown = {k: v.prog if isinstance(v, argparse.ArgumentParser) else v for k, v in values.items()}
        return {**shown, "func": f"{values['func'].__module__}.{values['func'].__qualname__}"}

    assert parsed(build_parser(argv)) == parsed(build_parser())



def test_the_start_log_of_serve_holds_no_line_of_alembics_plugins(tmp_path: Path) -> None:
    """Alembic 1.17+ logs each built-in plugin as it is imported, at INFO, the level of `serve`: seven lines at the
    top of every start's log. A data folder that is a file ends this start early, as its last line says."""
    (tmp_path / "data").touch()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TOOLSCOUT_DATA_DIR": str(tmp_path / "data")}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "service.cli", "serve", "--port", str(port)]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "must be a folder this user may write" in done.stderr, done.stderr
    assert "alembic.runtime.plugins" not in done.stderr
