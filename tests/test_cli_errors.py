"""CLI errors are one line that says what to change, never a stack trace: an index another process holds (the CLI
working straight on a data folder when it reached no service), a service that wants a key."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.index.edge import EdgeIndex
from service.cli import build_parser, main
from service.cli.core import ExplainedStartFailure, fail
from tests.processes import free_port


def test_a_search_on_a_folder_whose_index_is_held_says_which_api_it_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_DEMO_CATALOG", "false")
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")  # nothing listens there
    (tmp_path / "toolscout.db").touch()  # a running `toolscout serve` has its database ...
    held = EdgeIndex(tmp_path / "index", 384)  # ... and holds its index
    try:
        assert main(["search", "what time is it"]) == 1
        assert main(["index", str(Path(__file__).parent / "fixtures" / "retrieval" / "catalog.jsonl")]) == 1
    finally:
        held.close()
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and errors[0] == errors[1]
    assert errors[0].startswith("error: edge index: opening ")
    assert errors[0].endswith(
        f"Is a `toolscout serve` using {tmp_path.resolve()}? The CLI reaches a running service at "
        "TOOLSCOUT_FRONTEND__API_URL (http://127.0.0.1:9): set it to the service's address"
    )


def test_a_search_in_the_folder_of_a_service_on_another_port_says_where_it_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scripts/serve.sh --port 8791`, then `toolscout search` in its folder: 4-5 s, then the embedded engine's
    `Can't init WAL: Kind(WouldBlock)` and a guess. Now its address at once; a stale address changes nothing."""
    import http.server
    import threading
    import time

    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_DEMO_CATALOG", "false")
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")  # nothing listens there
    (tmp_path / "toolscout.db").touch()

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's protocol
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    (tmp_path / "serve.url").write_text(url + "\n")  # as `toolscout serve` writes it once it listens
    try:
        started = time.perf_counter()
        assert main(["search", "what time is it"]) == 1
        assert main(["servers", "list"]) == 1
        assert time.perf_counter() - started < 3  # no index opened
    finally:
        server.shutdown()
        server.server_close()
    said = (
        f"error: no service at http://127.0.0.1:9 (TOOLSCOUT_FRONTEND__API_URL), but the `toolscout serve` of "
        f"{tmp_path.resolve()} listens at {url}: set TOOLSCOUT_FRONTEND__API_URL={url}"
    )
    assert capsys.readouterr().err.splitlines() == [said, said]
    held = EdgeIndex(tmp_path / "index", 384)  # the address is stale now: the folder's own refusal, as before
    try:
        assert main(["search", "what time is it"]) == 1
    finally:
        held.close()
    assert "Is a `toolscout serve` using" in capsys.readouterr().err


def test_a_refused_key_names_the_variable_the_cli_sends_it_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail({"status": 401, "detail": "An API key is required"}) == 1
    assert fail({"status": 404, "detail": "No tool named 'x'"}) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: An API key is required (the CLI sends the key in TOOLSCOUT_FRONTEND__API_KEY)",
        "error: No tool named 'x'",
    ]


async def _failed_start(traceback_text: str) -> list[dict[str, object]]:
    """What uvicorn receives from an app whose start-up failed with this traceback (as Starlette sends it)."""

    async def app(scope: object, receive: object, send: Any) -> None:
        await send({"type": "lifespan.startup.failed", "message": traceback_text})

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await ExplainedStartFailure(app, Path("/srv/data"))({"type": "lifespan"}, None, send)
    return sent


async def test_a_start_up_refusal_is_logged_as_its_message_not_a_traceback() -> None:
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nservice.security.openmode.StartupRefused: '
    assert await _failed_start(trace + "Refusing to start: bound to 0.0.0.0") == [
        {"type": "lifespan.startup.failed", "message": "Refusing to start: bound to 0.0.0.0"}
    ]
    held = "Traceback ...\nindexer.index.base.IndexBackendError: edge index: opening /srv/data/index failed: WouldBlock"
    held += "\n"
    assert await _failed_start(held) == [
        {
            "type": "lifespan.startup.failed",
            "message": "edge index: opening /srv/data/index failed: WouldBlock. "
            "Is another `toolscout serve` using /srv/data?",
        }
    ]
    unwritable = "Traceback ...\nNotADirectoryError: [Errno 20] Not a directory: '/srv/data'"
    assert await _failed_start(unwritable) == [
        {
            "type": "lifespan.startup.failed",
            "message": "[Errno 20] Not a directory: '/srv/data' (TOOLSCOUT_DATA_DIR, /srv/data, must be a folder "
            "this user may write)",
        }
    ]
    other = "Traceback ...\nKeyError: 'x'"  # a bug keeps its traceback
    assert await _failed_start(other) == [{"type": "lifespan.startup.failed", "message": other}]


def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    """`toolscout analytics tools | head`: exit status 141 (SIGPIPE's), no BrokenPipeError traceback."""
    program = (
        "import sys\nimport service.cli.core as core\n"
        "core.cmd_search = lambda args: [print('x' * 100) for _ in range(100_000)] and 0\n"
        "from service.cli import main\nsys.exit(main(['search', 'anything']))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.read(10) == b"x" * 10
    child.stdout.close()
    assert child.wait(timeout=60) == 141
    assert child.stderr.read() == b""


def test_serve_on_a_port_another_process_holds_says_so_before_it_starts_anything(tmp_path: Path) -> None:
    """The port is checked first: the migrations, the model and the demo servers ran (seconds, more on a first
    start that exports the model) before uvicorn found the port taken."""
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "TOOLSCOUT_DATA_DIR": str(tmp_path / "data"),
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
    }
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (is another `toolscout serve` running? "
        "--port or TOOLSCOUT_PORT chooses another port)"
    ]
    assert not (tmp_path / "data").exists()  # no database, index or model export was made


def test_a_search_with_no_service_and_no_database_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run in another folder than the service's (or with the service on another port), `search` made an empty
    database and index there, exported the model (36 s on a first run here) and said "0 tools"."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")  # nothing listens there
    assert main(["search", "what time is it"]) == 1
    database = (tmp_path / "elsewhere" / "toolscout.db").resolve()
    assert capsys.readouterr().err == (
        f"error: no service at http://127.0.0.1:9 (TOOLSCOUT_FRONTEND__API_URL) and no database at {database}: the "
        "CLI uses the data folder of the folder it runs in (TOOLSCOUT_DATA_DIR, default `.toolscout`); run it where "
        "`toolscout serve` runs, or set TOOLSCOUT_DATA_DIR or TOOLSCOUT_DB__URL\n"
    )
    assert not (tmp_path / "elsewhere").exists()


def test_serve_with_a_servers_file_it_cannot_use_says_why_before_it_starts_anything(tmp_path: Path) -> None:
    """It was a traceback of some 60 lines, after the migrations, the index and the model had opened."""
    broken = tmp_path / "servers.yaml"
    broken.write_text("mcpServers:\n  time: {command: python, args: [-m, x]\n  other: 1\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "TOOLSCOUT_DATA_DIR": str(tmp_path / "data"), "TOOLSCOUT_EXECUTION__SERVERS_FILE": str(broken)}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", "9"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"error: servers file {broken} is not valid YAML: expected ',' or '}}', but got '<scalar>' (line 3, column 3)"
        " (TOOLSCOUT_EXECUTION__SERVERS_FILE)\n",
    )
    assert not (tmp_path / "data").exists()


def test_an_analytics_window_that_is_no_date_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["analytics", "tools", "--since", "yesterday"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "toolscout analytics tools: error: argument --since: not an ISO 8601 date or time: 'yesterday' (e.g. "
        "2026-12-01 or 2026-12-01T08:00, UTC) (see `toolscout analytics tools --help`)\n"
    )


def test_an_analytics_window_of_no_days_or_ending_before_it_starts_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--days -3` gave an empty window ("no data in this window"), as did an --until before the window's start."""
    said = []
    for options in (
        ["--days", "-3"],
        ["--days", "0"],
        ["--days", "nan"],
        ["--days", "1e12"],
        ["--until", "2020-01-01"],
        ["--since", "2026-12-05", "--until", "2026-12-01"],
    ):
        with pytest.raises(SystemExit) as exited:
            main(["analytics", "callers", *options])
        assert exited.value.code == 2
        said.append(capsys.readouterr().err)
    hint = " (see `toolscout analytics callers --help`)\n"
    prefix = "toolscout analytics callers: error: argument "
    assert said == [
        f"{prefix}--days: expected a number of days above 0, such as 7 or 0.5, got '-3'{hint}",
        f"{prefix}--days: expected a number of days above 0, such as 7 or 0.5, got '0'{hint}",
        f"{prefix}--days: expected a number of days above 0, such as 7 or 0.5, got 'nan'{hint}",
        f"{prefix}--days: 1e12 days ago is before the year 1{hint}",
        f"{prefix}--until: 2020-01-01 00:00 is not after the window's start (30 days ago, --days){hint}",
        f"{prefix}--until: 2026-12-01 00:00 is not after --since{hint}",
    ]


def test_an_empty_analytics_answer_names_its_window_and_what_to_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every empty table read "no data in this window", naming neither the window nor what was missing."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "--caller", "first", "--role", "admin"]) == 0  # makes the database
    capsys.readouterr()
    said = {}
    for argv in (
        ["tools", "--since", "2026-12-01", "--until", "2026-12-03T12:00"],
        ["callers", "--since", "2026-12-01", "--caller", "bob"],
        ["timeseries", "--since", "2026-12-01", "--until", "2026-12-02"],
        ["cooccurrence", "--since", "2026-12-01", "--until", "2026-12-02"],
        ["unanswered", "--since", "2026-12-01", "--until", "2026-12-02"],
        ["unanswered", "--kind", "no_call", "--since", "2026-12-01", "--until", "2026-12-02"],
    ):
        assert main(["analytics", *argv]) == 0
        said[" ".join(argv[:3])] = capsys.readouterr().out
    window = "from 2026-12-01 00:00 to 2026-12-02 00:00 UTC"
    assert said == {
        "tools --since 2026-12-01": "no calls from 2026-12-01 00:00 to 2026-12-03 12:00 UTC; widen it with --days or "
        "--since\n",
        "callers --since 2026-12-01": "no calls from 2026-12-01 00:00 to now UTC, caller bob; widen it with --days or "
        "--since\n",
        "timeseries --since 2026-12-01": f"no calls or searches {window}; widen it with --days or --since\n",
        "cooccurrence --since 2026-12-01": f"no two tools called one after the other by one caller {window}\n",
        "unanswered --since 2026-12-01": f"no search without a result {window}; --kind no_call lists the searches no "
        "call followed\n",
        "unanswered --kind no_call": f"no search left without a call {window}; --kind no_result lists the searches "
        "that found nothing\n",
    }
    assert main(["analytics", "tools"]) == 0
    assert capsys.readouterr().out.endswith(" to now UTC (--days 30); widen it with --days or --since\n")


def test_analytics_tables_read_rates_in_percent_and_moments_to_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """success_rate read 0.3333 and last_at 2026-12-07T16:53:39.148579+00:00; --json keeps the values."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from service.db.models import Execution, Search

    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "--caller", "first", "--role", "admin"]) == 0
    at = datetime.now(UTC).replace(microsecond=148579) - timedelta(hours=1)
    engine = create_engine(f"sqlite:///{tmp_path / 'toolscout.db'}")
    with Session(engine) as session:
        for n, status in enumerate(["ok", "tool_error", "tool_error"]):
            session.add(Execution(
                id=f"e{n}", caller="bob", tool="git__git_log", server_id="git", arguments_digest="0" * 64,
                status=status, duration_ms=10.0, started_at=at, finished_at=at + timedelta(milliseconds=10),
            ))
        session.add(Search(
            id="s1", caller="bob", query="show the log", k=3, results=[{"name": "git__git_log", "score": 1.0}],
            result_count=1, created_at=at,
        ))
        session.commit()
    engine.dispose()
    capsys.readouterr()
    assert main(["analytics", "tools"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:3] == ["git__git_log", "3", "33.3%"]
    assert main(["analytics", "unanswered", "--kind", "no_call"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split()
    assert row[:4] == ["1", "1", f"{at:%Y-%m-%d}", f"{at:%H:%M:%S}Z"]
    assert main(["analytics", "tools", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["success_rate"] == 0.3333


def test_keys_and_analytics_of_a_folder_without_a_database_say_where_they_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run in another folder than the service's, `keys list` made an empty database there and said "no API keys:
    the service runs open", `analytics` said "no data", and `keys create` printed a key the service never saw."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path / "elsewhere"))
    database = (tmp_path / "elsewhere" / "toolscout.db").resolve()
    for argv in (["keys", "list"], ["keys", "revoke", "tsk_x"], ["analytics", "tools"], ["analytics", "callers"]):
        assert main(argv) == 1, argv
        assert capsys.readouterr().err == (
            f"error: no database at {database}: the CLI uses the data folder of the folder it runs in "
            "(TOOLSCOUT_DATA_DIR, default `.toolscout`); run it where `toolscout serve` runs, or set "
            "TOOLSCOUT_DATA_DIR or TOOLSCOUT_DB__URL\n"
        ), argv
    assert not (tmp_path / "elsewhere").exists()
    # The first key of a folder is made here (a service off loopback needs one to start), and says where it went.
    assert main(["keys", "create", "--caller", "first", "--role", "admin"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("key for first (roles: admin), id ") and database.exists()
    assert err.splitlines() == [
        "Store it now: only its hash is kept. Every request without a key is refused from now on.",
        f"note: created a new database at {database} for this key; a `toolscout serve` of another folder does not "
        "see it (TOOLSCOUT_DATA_DIR)",
    ]
    assert main(["keys", "create", "--caller", "second"]) == 0
    # Said of every key, it was not true of this one (the first was), and an admin is there.
    assert capsys.readouterr().err == "Store it now: only its hash is kept.\n"
    assert main(["keys", "list"]) == 0
    assert [line.split()[2] for line in capsys.readouterr().out.splitlines()[2:]] == ["first", "second"]


def test_a_first_key_without_the_admin_role_says_no_key_is_an_admins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The open local admin goes with the first key: `--role dev` left no admin, and nothing said so."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    no_admin = (
        " No key has the admin role: managing keys and servers over the API and the console's Keys page need one "
        "(`toolscout keys create --caller NAME --role admin`)."
    )
    assert main(["keys", "create", "--caller", "bob", "--role", "dev"]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        "Store it now: only its hash is kept. Every request without a key is refused from now on." + no_admin
    )
    assert main(["keys", "create", "--caller", "carol", "--role", "admin"]) == 0
    assert capsys.readouterr().err.splitlines() == ["Store it now: only its hash is kept."]


def test_held_tools_of_a_folder_without_a_database_say_where_they_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no service to ask, `tools held` made an empty database in whatever folder it ran in and said "0 tools
    held"; `tools approve` said there was no such tool."""
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")  # nothing listens there
    database = (tmp_path / "elsewhere" / "toolscout.db").resolve()
    for argv in (["tools", "held"], ["tools", "approve", "git__git_log"]):
        assert main(argv) == 1, argv
        assert capsys.readouterr().err.startswith(f"error: no database at {database}: the CLI uses the data folder")
    assert not (tmp_path / "elsewhere").exists()


def test_the_http_front_end_refuses_to_listen_beyond_loopback_without_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("TOOLSCOUT_FRONTEND__HTTP_API_KEY", raising=False)
    assert main(["mcp", "--transport", "http", "--host", "0.0.0.0", "--port", "9"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: refusing to listen on 0.0.0.0") and "TOOLSCOUT_FRONTEND__HTTP_API_KEY" in error


def test_servers_list_without_a_service_names_the_setting_and_the_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "the service at http://127.0.0.1:8765 does not answer ([Errno 111] Connection refused)" only."""
    port = free_port()
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", f"http://127.0.0.1:{port}")
    assert main(["servers", "list"]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: no service at http://127.0.0.1:{port} (TOOLSCOUT_FRONTEND__API_URL): ")
    assert error.endswith("; start it with `toolscout serve`, or set TOOLSCOUT_FRONTEND__API_URL to its address\n")
    assert error.count("\n") == 1


async def test_servers_list_with_a_key_that_is_not_an_admins_prints_the_servers_it_may_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A non-admin's GET /servers gives id, state, tools and last sync only: the table read `transport` (KeyError).
    import anyio

    from tests.security.conftest import opened_world, serving

    async with opened_world(tmp_path) as world, serving(world["app"]) as url:
        monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", url)
        monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_KEY", world["dev"])
        capsys.readouterr()
        assert await anyio.to_thread.run_sync(main, ["servers", "list"]) == 0
    printed = capsys.readouterr()
    rows = [line.split() for line in printed.out.splitlines()[1:]]
    assert rows == [["public", "catalog", "1"], ["util", "catalog", "1"]], printed  # the tools it may use
    assert printed.err == ""


@pytest.mark.parametrize(("name", "text"), [("empty.jsonl", "\n"), ("empty.json", '{"tools": []}')])
def test_indexing_a_file_without_tools_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLSCOUT_DEMO_CATALOG", "false")
    monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", "http://127.0.0.1:9")  # nothing listens there
    path = tmp_path / name
    path.write_text(text)
    assert main(["index", str(path)]) == 1
    printed = capsys.readouterr()
    assert printed.err == f"error: {path}: no tools in it (a JSON Lines tool a line, or an MCP tools/list)\n"
    assert printed.out == ""


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["mcp", "--mode", "bogus"], "toolscout mcp: error: argument --mode: invalid choice: 'bogus'"),
        (["mcp", "--transport", "tcp"], "toolscout mcp: error: argument --transport: invalid choice: 'tcp'"),
        (["bench", "nope"], "toolscout bench: error: no command 'nope' (commands: search, tokens, analytics,"),
        (["mcp", "--port", "99999"], "toolscout mcp: error: argument --port: 99999 is not a port"),
        (["serve", "--port", "http"], "toolscout serve: error: argument --port: not a port number: 'http'"),
    ],
)
def test_a_wrong_choice_is_one_line_and_exit_status_2(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), lines
    assert lines[0].endswith(f"(see `toolscout {argv[0]} --help`)")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["search", "--sizes", "1000,abc"], "argument --sizes: expected a whole number of at least 1, got 'abc'"),
        (["scale", "--sizes", ","], "argument --sizes: expected comma-separated whole numbers, got ','"),
        (["load", "--concurrency", "0"], "argument --concurrency: expected a whole number of at least 1, got '0'"),
        (["execute", "--calls", "0"], "argument --calls: expected a whole number of at least 1, got '0'"),
        (["durability", "--warmup", "-1"], "argument --warmup: expected a whole number of at least 1, got '-1'"),
        (["embedder", "--texts", "0"], "argument --texts: expected a whole number of at least 1, got '0'"),
    ],
)
def test_a_bench_count_that_cannot_be_measured_is_refused_before_it_starts(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each of these was a traceback: int('abc'), fmean of no samples, numpy's broadcast of no texts.
    with pytest.raises(SystemExit) as exited:
        main(["bench", *argv])
    assert exited.value.code == 2
    command = f"toolscout bench {argv[0]}"
    assert capsys.readouterr().err == f"{command}: error: {said} (see `{command} --help`)\n"


def test_a_bench_without_its_dev_set_says_which_files_and_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog, queries = tmp_path / "catalog.jsonl", tmp_path / "queries.jsonl"
    assert main(["bench", "learning", "--catalog", str(catalog), "--queries", str(queries)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {catalog}, {queries} not found: the benchmarks read shared/eval")
    assert lines[0].endswith("pass --catalog FILE --queries FILE (JSON Lines, as toolscout eval)")


def test_an_error_raised_inside_a_task_group_is_still_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from service.benchmarks import BenchFailed
    from service.cli import _only_error

    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [BenchFailed("POST /execute answered 421")])])
    assert isinstance(_only_error(nested), BenchFailed)
    assert _only_error(ExceptionGroup("two", [BenchFailed("a"), BenchFailed("b")])) is None
    assert _only_error(ExceptionGroup("other", [ValueError("x")])) is None


def _commands(parser: argparse.ArgumentParser, path: str = "toolscout") -> Iterator[tuple[str, str | None, Any]]:
    """(command, its line in the parent's --help, its parser) for every subcommand, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, command in action.choices.items():
                yield f"{path} {name}", helps.get(name), command
                yield from _commands(command, f"{path} {name}")


def test_every_command_says_in_one_line_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    commands = list(_commands(build_parser()))
    assert len(commands) >= 35  # serve, index, search, eval, mcp and the groups' commands
    for command, line, parser in commands:
        assert line and "\n" not in line and len(line) <= 100, command
        assert line.split()[0] in VERBS, f"{command}: {line!r} does not start with what it does"
        assert parser.description.startswith(line) or len(parser.description) > len(line), command
        options = [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]
        assert [a.dest for a in options if not a.help] == [], command
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "run the REST API, console and upstream gateway over HTTP" in capsys.readouterr().out


def test_every_bench_option_says_in_one_line_what_it_sets_and_its_default() -> None:
    from service.cli.bench import BENCH_MODULES

    benches = [(c, p) for c, _, p in _commands(build_parser()) if c.startswith("toolscout bench ")]
    assert len(benches) == len(BENCH_MODULES) == 9
    unexplained = []
    for command, parser in benches:
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            option = f"{command} {'/'.join(action.option_strings) or action.dest}"
            text = formatter._expand_help(action) if action.help else ""  # %(default)s filled in, as --help shows
            if not text or "\n" in text or len(text) > 160:
                unexplained.append(f"{option}: {text!r}")
            elif action.default not in (None, False) and "default" not in text:
                unexplained.append(f"{option}: {text!r} does not say its default {action.default!r}")
    assert unexplained == []


VERBS = {
    "run", "register", "search", "measure", "count", "time", "compare", "replay", "load", "manage", "create", "list",
    "revoke", "remove", "report", "show", "install", "release", "export",
}
