"""Supervised background work: each loop of the service runs under one `Supervisor`, which restarts it
with exponential backoff after any error, logs the error with its traceback, and reports every loop's state
(running, backoff, stopped) for `/readyz`.

A loop that returns on its own has finished (a writer that drained at shutdown); one that raises is
restarted, after a delay that doubles with each failure in a row and resets once a run lasted
`stable_seconds`. Cancellation (`stop`) is the only way to end a loop that does not return."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

logger = logging.getLogger(__name__)

Loop = Callable[[], Awaitable[None]]


@dataclass
class TaskStatus:
    """What a supervised loop is doing and how it fared."""

    name: str
    state: str = "starting"  # running | backoff | stopped
    restarts: int = 0
    last_error: str | None = None
    last_error_at: datetime | None = None
    next_attempt_in: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape shown by /readyz, which answers anyone: the error's kind, not its text (a database
        error quotes the server's address, the database's name, SQL and its parameters; the log has it all)."""
        return {
            "state": self.state,
            "restarts": self.restarts,
            "last_error": error_kind(self.last_error),
            "last_error_at": self.last_error_at.isoformat() if self.last_error_at else None,
            "next_attempt_in": self.next_attempt_in,
        }


def error_kind(message: str | None) -> str | None:
    """The exception class of a `Class: text` error line."""
    return None if message is None else message.partition(":")[0]


class Supervisor:
    """Runs named background loops and restarts them with backoff on any error."""

    def __init__(self, initial_seconds: float = 0.5, max_seconds: float = 30.0, stable_seconds: float = 60.0) -> None:
        self.initial_seconds = initial_seconds
        self.max_seconds = max_seconds
        self.stable_seconds = stable_seconds
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.status: dict[str, TaskStatus] = {}

    def start(self, name: str, loop: Loop) -> asyncio.Task[None]:
        """Run `loop` under supervision (a loop of the same name still running is an error)."""
        current = self._tasks.get(name)
        if current is not None and not current.done():
            raise RuntimeError(f"background task {name!r} is already running")
        status = self.status[name] = TaskStatus(name)
        task = asyncio.get_running_loop().create_task(self._supervise(loop, status), name=name)
        self._tasks[name] = task
        return task

    def task(self, name: str) -> asyncio.Task[None] | None:
        """The supervising task of a loop."""
        return self._tasks.get(name)

    def healthy(self) -> bool:
        """No loop is waiting to restart after an error."""
        return all(s.state != "backoff" for s in self.status.values())

    def report(self) -> dict[str, dict[str, Any]]:
        """Every loop's status, by name."""
        return {name: status.as_dict() for name, status in sorted(self.status.items())}

    async def wait(self, name: str) -> None:
        """Wait for a loop to finish by itself (errors are still restarted meanwhile)."""
        task = self._tasks.get(name)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def stop(self, name: str) -> None:
        """Cancel a loop and wait for it."""
        task = self._tasks.pop(name, None)
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.status[name].state = "stopped"

    async def stop_all(self) -> None:
        """Cancel every loop."""
        for name in list(self._tasks):
            await self.stop(name)

    async def _supervise(self, loop: Loop, status: TaskStatus) -> None:
        failures = 0
        while True:
            status.state, status.next_attempt_in = "running", None
            started = time.monotonic()
            try:
                await loop()
            except asyncio.CancelledError:
                status.state = "stopped"
                raise
            except Exception as exc:  # noqa: BLE001 - a supervisor restarts on any error, that is its job
                failures = 1 if time.monotonic() - started >= self.stable_seconds else failures + 1
                delay = min(self.max_seconds, self.initial_seconds * 2 ** (failures - 1))
                status.restarts += 1
                status.last_error = f"{type(exc).__name__}: {exc}"[:500]
                status.last_error_at = datetime.now(UTC)
                status.state, status.next_attempt_in = "backoff", round(delay, 3)
                logger.error("background task %s failed; restarting in %.1f s", status.name, delay, exc_info=exc)
                await asyncio.sleep(delay)
                continue
            status.state = "stopped"
            return
