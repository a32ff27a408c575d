"""A command line argparse refuses is one line that names the command it was given to and that command's help:
never the name of the attribute argparse stores a command in (`keys_command`), nor `toolscout --help` for an
option of `toolscout search`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            [],
            "toolscout: error: a command is required: serve, index, search, eval, bench, keys, analytics, mcp, "
            "servers, tools, models (see `toolscout --help`)",
        ),
        (["keys"], "toolscout keys: error: a command is required: create, list, revoke (see `toolscout keys --help`)"),
        (
            ["serach", "x"],
            "toolscout: error: no command 'serach' (did you mean search? commands: serve, index, "
            "search, eval, bench, keys, analytics, mcp, servers, tools, models) (see `toolscout --help`)",
        ),
        (
            ["search", "--bogus", "x"],
            "toolscout search: error: unrecognized arguments: --bogus (see `toolscout search --help`)",
        ),
        (
            ["search", "show", "me", "commits"],
            "toolscout search: error: unrecognized arguments: me commits (an "
            "argument of several words goes in quotes) (see `toolscout search --help`)",
        ),
        (
            ["analytics", "tools", "--days", "3", "extra"],
            "toolscout analytics tools: error: unrecognized arguments: extra (see `toolscout analytics tools --help`)",
        ),
        (
            ["mcp", "--api-url", "localhost:8765"],
            "toolscout mcp: error: argument --api-url: expected an http:// or https:// URL, such as "
            "http://127.0.0.1:8765, got 'localhost:8765' (see `toolscout mcp --help`)",
        ),
        (
            ["mcp", "--transport", "http", "--path", "mcp"],
            "toolscout mcp: error: argument --path: a path starts with /, such as /mcp, got 'mcp' (see `toolscout mcp "
            "--help`)",
        ),
        (
            ["search", "x", "-k", "0"],  # was the API's "Invalid request: /body/k: ..." after the request
            "toolscout search: error: argument -k: expected 1 or more, got 0 (see `toolscout search --help`)",
        ),
        (
            ["--port", "9000", "serve"],  # was "no command '9000'"
            "toolscout: error: --port is not an option of toolscout itself: options go after their command, as in "
            "`toolscout serve --port 9000` (see `toolscout --help`)",
        ),
        (["keys", "list", "--json", "--al"], None),  # an abbreviation argparse takes: no error
    ],
)
def test_a_refused_command_line_names_its_command(
    argv: list[str],
    said: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: object,
) -> None:
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    if said is None:
        assert main(argv) == 1  # went on to the command: no database in an empty folder
        assert capsys.readouterr().err.startswith("error: no database at ")
        return
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == said + "\n"


@pytest.mark.parametrize("command", ["search", "index"])
def test_the_help_of_search_and_index_says_where_they_act(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Neither said they go through the service at TOOLSCOUT_FRONTEND__API_URL, so one on another port went unseen."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert (
        "through the running service at TOOLSCOUT_FRONTEND__API_URL (default http://127.0.0.1:8765; its key in "
        "TOOLSCOUT_FRONTEND__API_KEY), else straight in the data folder of the folder it runs in" in said
    )
    if command == "search":
        assert "how many tools (default TOOLSCOUT_SEARCH__DEFAULT_K, 5)" in said


def test_help_as_a_command_is_the_help_of_the_command_after_it(capsys: pytest.CaptureFixture[str]) -> None:
    """`toolscout help` and `toolscout help keys` were "no command 'help'"."""
    for argv, usage in ((["help"], "usage: toolscout [-h]"), (["help", "keys"], "usage: toolscout keys [-h]")):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 0 and capsys.readouterr().out.startswith(usage)
    with pytest.raises(SystemExit):  # an option of its own before the command is still one
        main(["--log", "INFO", "--version"])
    assert capsys.readouterr().out.startswith("toolscout ")


@pytest.mark.parametrize("option", ["--version", "-V"])
def test_the_version_option_prints_the_version_without_a_command(option: str) -> None:
    """`toolscout --version` was "a command is required", exit 2; it imports no command's module (4 s of 4.1)."""
    from service import version

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "service.cli", option],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (done.returncode, done.stdout) == (0, f"toolscout {version()}\n")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "service.cli.core" not in imported and "service.cli.bench" not in imported


def test_the_stdio_front_end_typed_in_a_terminal_says_what_it_is_for(tmp_path: Path) -> None:
    """`toolscout mcp` in a terminal waited in silence for JSON-RPC; a chat client's pipe still gets no such line."""
    import pty

    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLSCOUT_FRONTEND__API_URL": "http://127.0.0.1:9"}
    command = [sys.executable, "-m", "service.cli", "mcp"]
    process = subprocess.Popen(command, stdin=terminal, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
    finally:
        process.kill()
        process.wait()
        os.close(controller)
        os.close(terminal)
    assert line == (
        "Toolscout MCP front end (lazy) on stdin/stdout -> http://127.0.0.1:9: a chat client starts it (README: MCP "
        "front end), `--transport http` serves it over HTTP; Ctrl-C stops it\n"
    )
    piped = subprocess.run(command, input=b"", capture_output=True, env=env, cwd=tmp_path, timeout=60)
    assert b"a chat client starts it" not in piped.stderr


def test_the_http_front_end_on_a_port_another_process_holds_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["mcp", "--transport", "http", "--port", str(port)]) == 3
    assert capsys.readouterr().err == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (is another front end running? --port or "
        "TOOLSCOUT_FRONTEND__HTTP_PORT chooses another port)\n"
    )


def test_serve_on_an_address_that_is_not_this_machines_names_the_host_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It was told "is another `toolscout serve` running? --port or TOOLSCOUT_PORT chooses another port"."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    port = free_port()
    assert main(["serve", "--host", "192.0.2.1", "--port", str(port)]) == 3  # TEST-NET-1: no address of this host
    assert capsys.readouterr().err == (
        f"error: cannot listen on 192.0.2.1:{port}: Cannot assign requested address (--host or TOOLSCOUT_HOST "
        "chooses the address to listen on (127.0.0.1: this machine only))\n"
    )


def test_serve_with_a_permissions_file_it_cannot_use_says_why_before_it_starts_anything(tmp_path: Path) -> None:
    """It was a traceback of some 130 lines, after the migrations, the index and the model had opened."""
    misspelt = tmp_path / "permissions.yaml"
    misspelt.write_text('roles:\n  default:\n    alow: ["server:time"]\n')
    said = []
    for path in (misspelt, tmp_path / "missing.yaml"):
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "TOOLSCOUT_DATA_DIR": str(tmp_path / "data"),
            "TOOLSCOUT_POLICY__PERMISSIONS_FILE": str(path),
        }
        done = subprocess.run(
            [sys.executable, "-m", "service.cli", "serve", "--port", "9"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        said.append((done.returncode, done.stderr))
    assert said == [
        (
            2,
            f"error: {misspelt}: role 'default' may only have the keys allow and deny (given: alow) "
            "(TOOLSCOUT_POLICY__PERMISSIONS_FILE)\n",
        ),
        (
            2,
            f"error: cannot read permissions file {tmp_path / 'missing.yaml'}: [Errno 2] No such file or directory: "
            f"'{tmp_path / 'missing.yaml'}' (TOOLSCOUT_POLICY__PERMISSIONS_FILE)\n",
        ),
    ]
    assert not (tmp_path / "data").exists()


def test_a_database_that_cannot_be_reached_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It was sqlalchemy's traceback of some 50 lines (`keys list`), 181 at `serve`."""
    port = free_port()  # nothing listens there
    url = f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{port}/toolscout"
    monkeypatch.setenv("TOOLSCOUT_DB__URL", url)
    assert main(["keys", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: cannot connect to the database postgresql+psycopg://postgres:***@127.0.0.1:{port}/toolscout: "
        f'connection failed: connection to server at "127.0.0.1", port {port} failed: Connection refused'
    )
    assert err.endswith(" (TOOLSCOUT_DB__URL)\n") and err.count("\n") == 1 and "s3cret" not in err
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOOLSCOUT_DATA_DIR": str(tmp_path / "data"),
        "TOOLSCOUT_DB__URL": url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(free_port())],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert (
        f"ERROR:    cannot connect to the database postgresql+psycopg://postgres:***@127.0.0.1:{port}/" in done.stderr
    )


async def test_a_qdrant_server_that_does_not_answer_names_its_url_not_the_data_folder() -> None:
    """Its start said "Is another `toolscout serve` using .toolscout?", the embedded index's hint."""
    from tests.test_cli_errors import _failed_start

    trace = "Traceback ...\nindexer.index.base.IndexBackendError: qdrant index: collection_exists failed: [Errno 111] "
    assert await _failed_start(trace + "Connection refused\n") == [
        {
            "type": "lifespan.startup.failed",
            "message": "qdrant index: collection_exists failed: [Errno 111] Connection refused (TOOLSCOUT_INDEX__URL: "
            "is the Qdrant server running?)",
        }
    ]


def test_a_local_search_on_a_database_that_cannot_be_reached_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    port = free_port()
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")  # no service: the CLI works locally
    monkeypatch.setenv("TOOLSCOUT_DB__URL", f"postgresql+psycopg://postgres@127.0.0.1:{port}/toolscout")
    assert main(["search", "what time is it"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot connect to the database postgresql+psycopg://postgres@127.0.0.1:{port}/")
    assert err.endswith(" (TOOLSCOUT_DB__URL)\n") and err.count("\n") == 1


def test_indexing_a_folder_says_it_is_a_folder(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`toolscout index /some/folder` said "no such file" of a folder that is there."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")
    assert main(["index", str(tmp_path)]) == 1
    assert main(["index", str(tmp_path / "missing.jsonl")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {tmp_path}: a folder, not a catalog file",
        f"error: {tmp_path / 'missing.jsonl'}: no such file",
    ]


def test_a_key_of_a_role_the_permissions_file_does_not_have_is_noted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`--role develper` made a key that may use the default role's tools only, without a word."""
    permissions = tmp_path / "permissions.yaml"
    permissions.write_text('roles:\n  default:\n    allow: ["server:time"]\n  developer:\n    allow: ["server:git"]\n')
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_POLICY__PERMISSIONS_FILE", str(permissions))
    notes = []
    for role in ("develper", "developer", "admin", "approver"):
        assert main(["keys", "create", "--caller", f"c-{role}", "--role", role, "--json"]) == 0
        notes.append([line for line in capsys.readouterr().err.splitlines() if line.startswith("note: the perm")])
    assert notes == [
        [
            f"note: the permissions file {permissions} has no role 'develper' (its roles: default, developer): the key "
            "may use what `default` allows, no more"
        ],
        [],
        [],
        [],
    ]


def test_the_summary_of_servers_names_each_of_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """`toolscout --help` said "install or list the upstream MCP servers" of a command that also removes one."""
    with pytest.raises(SystemExit):
        main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "servers install the demo servers, list the upstream MCP servers or remove one" in said
