"""The engine's child process as the service sees it: start it with a run's configuration, exchange JSON
lines with it, kill it. The service's event loop never waits on JavaScript: a busy or stuck script only
keeps its own process busy, and the wall-clock budget ends it with a kill."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from service.security.json_body import read_json

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("worker.py")
STREAM_LIMIT = 64 * 1024 * 1024  # the longest message (a call's arguments, the script's return value)
_STDERR_TAIL = 2000


class Sandbox:
    """One child process running one script."""

    def __init__(self, process: asyncio.subprocess.Process, turn: str = "") -> None:
        self.process = process
        self.turn = turn  # whose turn its long messages take at the parse thread: the run's caller

    @classmethod
    async def start(cls, config: dict[str, Any], turn: str = "") -> Sandbox:
        """Start a child (isolated mode: no user site, no PYTHON* variables; an empty environment, so the
        service's secrets are not in the engine's process) and hand it the run."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            str(WORKER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=STREAM_LIMIT,
            env={},
        )
        sandbox = cls(process, turn)
        await sandbox.send(config)
        return sandbox

    async def send(self, message: dict[str, Any]) -> bool:
        """Write one message; False when the child is gone."""
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing():
            return False
        try:
            stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")  # ASCII: lone surrogates too
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the child closed its output."""
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            return None
        # A call's arguments and the return value reach 1 MB: read on the event loop with the collector running,
        # 110,000 small objects of one call held it 0.25-0.65 s (every call, refused ones too).
        message = await read_json(line, self.turn)
        return message if isinstance(message, dict) else None

    async def diagnostics(self) -> str:
        """Why the child stopped, for the caller: its exit code. The end of what it wrote on stderr (a Python
        traceback) goes to the service's log only."""
        code = await self.process.wait()
        tail = b""
        if self.process.stderr is not None:
            with contextlib.suppress(Exception):
                tail = await asyncio.wait_for(self.process.stderr.read(), 1.0)
        text = tail.decode(errors="replace").strip()[-_STDERR_TAIL:]
        if text:
            logger.warning("code-mode engine %s exited with code %s: %s", self.process.pid, code, text)
        return f"exit code {code}"

    async def close(self) -> None:
        """Kill the child if it still runs and reap it."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
