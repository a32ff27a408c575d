"""A command line argparse refuses is one line that names the command it was given to and that command's help:
never the name of the attribute argparse stores a command in (`keys_command`), nor `toolscout --help` for an
option of `toolscout search`."""

from __future__ import annotations

import socket

import pytest

from service.cli import main


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
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (--port or TOOLSCOUT_FRONTEND__HTTP_PORT "
        "chooses another port)\n"
    )
