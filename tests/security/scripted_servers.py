"""Hand-written stdio MCP servers for the upstream tests: a few lines of JSON-RPC each, after a shared head that
sends one message a line and gives the answers every server owes the SDK (`initialize`, `ping`); a body defines
`handle(method, id, message)` for the rest and ends with `serve(name, handle)`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HEAD = """
import json, sys, threading, time
lock = threading.Lock()
def send(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\\n"); sys.stdout.flush()
def answered(msg, name, capabilities=None):
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": capabilities or {"tools": {}}, "serverInfo": {"name": name, "version": "1"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        return False
    return True
def serve(name, handle, capabilities=None):
    for line in sys.stdin:
        msg = json.loads(line)
        if not answered(msg, name, capabilities):
            handle(msg.get("method"), msg.get("id"), msg)
"""


def scripted_entry(tmp_path: Path, name: str, body: str, *args: str) -> dict[str, Any]:
    """A servers-file entry that runs HEAD and `body` as a stdio server (`args` are its sys.argv[1:])."""
    script = tmp_path / f"{name}_server.py"
    script.write_text(HEAD + body)
    return {"command": sys.executable, "args": [str(script), *args]}
