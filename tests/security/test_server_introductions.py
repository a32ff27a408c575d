"""What an upstream says about itself at initialize (serverInfo's name, title, version and the instructions) is read
up to a bound: a server whose 13 MB answer to initialize (9 MB of instructions, a name and a version of 2 MB each,
under the 16 MB message limit) was screened whole for invisible characters and instructions on the event loop at
each sync (3.6 s held for 15 MB, every refresh, reconnection or list_changed), and every GET /servers repeated its
4 MB name and version."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from indexer.servers import MAX_INFO_CHARS
from service.db.models import Server
from tests.security.conftest import make_settings, running, servers_file

LOUD_SERVER = r"""
import json, sys
words = ("word " * 40 + "\n") * (9_000_000 // 201)
info = {"name": "n" * 2_000_000, "version": "v" * 2_000_000, "title": "Loud"}
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        out = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
               "serverInfo": info, "instructions": words}
    elif method == "tools/list":
        out = {"tools": [{"name": "t", "description": "A tool", "inputSchema": {"type": "object"}}]}
    elif method == "ping":
        out = {}
    else:
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": out}) + "\n")
    sys.stdout.flush()
"""


async def test_a_server_that_says_megabytes_about_itself_is_read_to_a_bound(tmp_path: Path) -> None:
    script = tmp_path / "loud_server.py"
    script.write_text(LOUD_SERVER)
    servers = {"loud": {"command": sys.executable, "args": [str(script)]}}
    execution = {"servers_file": servers_file(tmp_path, servers), "startup_wait_seconds": 60, "timeout_seconds": 20}
    async with running(make_settings(tmp_path, permissions=None, execution=execution)) as (app, http):
        held = 0.0
        refreshed = asyncio.Event()

        async def watch_the_loop() -> None:
            nonlocal held
            while not refreshed.is_set():
                started = time.monotonic()
                await asyncio.sleep(0.005)
                held = max(held, time.monotonic() - started - 0.005)

        watcher = asyncio.create_task(watch_the_loop())
        refresh = await http.post("/servers/loud/refresh")  # initialize again, then the sync of what it said
        refreshed.set()
        await watcher
        assert refresh.status_code == 200, refresh.text[:300]
        assert held < 1.0, f"the event loop was held {held:.2f} s"  # 2.9 s before the bound (1.2 s of it parsing)

        view = await http.get("/servers/loud")
        assert len(view.content) < 20_000, len(view.content)  # was 4 MB, at every GET /servers
        shown = view.json()["health"]["server_info"]
        assert shown == {"name": "n" * MAX_INFO_CHARS, "version": "v" * MAX_INFO_CHARS}
        async with app.state.resources.session() as session:
            row = await session.get(Server, "loud")
        assert row is not None
        assert row.info["instructions"] == " ".join(["word"] * 500)[:MAX_INFO_CHARS]
        assert (row.info["name"], row.info["title"]) == ("n" * MAX_INFO_CHARS, "Loud")
