"""Sustained traffic on replicas while something fails, and what it left: every answered call's log row.

`Traffic` keeps `/execute` (mcp-server-time) and `/search` requests going to every live replica until stopped and
records each answer: the execution ids of the 2xx, the status and body of anything else. `log_counts` reads
the replicas' database for those ids."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.cluster.cluster_support import Replica, rows
from tests.processes import free_port, wait_for_port

TIME_CALL = {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}
QUERIES = ["what time is it in Tokyo", "convert a time between timezones", "current time"]


@dataclass
class Traffic:
    """Workers sending calls and searches round-robin to the replicas not marked down."""

    replicas: list[Replica]
    workers: int = 4
    answered: list[str] = field(default_factory=list)  # execution ids of 2xx /execute answers
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: list[tuple[str, int, str, str]] = field(default_factory=list)  # path, status, content type, body
    unreachable: int = 0
    down: set[str] = field(default_factory=set)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    async def run(self, seconds: float | None = None) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            workers = [asyncio.create_task(self._work(http, n)) for n in range(self.workers)]
            if seconds is not None:
                await asyncio.sleep(seconds)
                self._stop.set()
            await asyncio.gather(*workers)

    def stop(self) -> None:
        self._stop.set()

    async def _work(self, http: httpx.AsyncClient, worker: int) -> None:
        while not self._stop.is_set():
            live = [r for r in self.replicas if r.name not in self.down]
            if not live:
                await asyncio.sleep(0.05)
                continue
            turn = next(self._turn)
            replica = live[turn % len(live)]
            if turn % 3 == 2:
                path, body = "/search", {"query": QUERIES[turn % len(QUERIES)], "k": 3}
            else:
                path, body = "/execute", TIME_CALL
            try:
                response = await http.post(f"{replica.url}{path}", json=body)
            except httpx.HTTPError:
                self.unreachable += 1
                await asyncio.sleep(0.02)
                continue
            self.statuses[(path, response.status_code)] += 1
            if 200 <= response.status_code < 300:
                if path == "/execute":
                    self.answered.append(response.json()["execution_id"])
            else:
                kind = response.headers.get("content-type", "")
                self.failures.append((path, response.status_code, kind, response.text[:300]))
                await asyncio.sleep(0.05)

    def server_errors(self) -> list[tuple[str, int, str, str]]:
        """The answers that are a 500 or no problem+json."""
        return [f for f in self.failures if f[1] == 500 or "problem+json" not in f[2]]


def logged_ids(database_url: str) -> Counter[str]:
    """How often each execution id is in the log."""
    return Counter(i for (i,) in rows(database_url, "SELECT id FROM executions"))


def missing(database_url: str, answered: list[str], timeout: float = 30.0) -> list[str]:
    """The answered calls whose row is not in the log, once the log has caught up (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        logged = logged_ids(database_url)
        lost = [i for i in answered if i not in logged]
        if not lost or time.monotonic() > deadline:
            return lost
        time.sleep(0.5)


@dataclass
class OwnRedis:
    """A redis-server of the test's own on a free port (no persistence), to stop and start again."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, cwd=self.folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, what="redis-server")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None
