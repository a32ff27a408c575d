"""Replicas of `toolscout serve` in child processes on one PostgreSQL database and one Redis (own key prefix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from indexer.embedding import HashingEmbedder
from service.resources import Resources, build_resources, close_resources, start_resources
from service.search.service import start_search
from tests.conftest import fresh_database, make_settings
from tests.database_link import DatabaseLink
from tests.processes import free_port, stop_process
from tests.upstream.upstream_support import TEST_SERVER

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/0"
# Replicas without a rate limit, statistics refreshed every second, and stdio servers added over the API allowed
# for this interpreter only (the test servers).
BUSY_REPLICAS = {
    "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
    "TOOLSCOUT_LEARNING__REFRESH_SECONDS": "1",
    "TOOLSCOUT_LEARNING__REFRESH_LAG_SECONDS": "0.5",
    "TOOLSCOUT_EXECUTION__ALLOW_API_STDIO": "true",
    "TOOLSCOUT_EXECUTION__API_STDIO_COMMANDS": json.dumps([sys.executable]),
}


@asynccontextmanager
async def replicas_in_process(root: Path, database_url: str, *, search: bool = False) -> AsyncIterator[list[Resources]]:
    """Two replicas' resources on one database in this process, each with its own data folder and connections."""
    started: list[Resources] = []
    try:
        for name in ("a", "b"):
            resources = build_resources(make_settings(root / name, db={"url": database_url}), HashingEmbedder())
            await start_resources(resources)
            if search:
                await start_search(resources)
            started.append(resources)
        yield started
    finally:
        for resources in started:
            await close_resources(resources)


@dataclass
class Replica:
    """One `toolscout serve` process."""

    name: str
    port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.data_dir / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Cluster:
    """Start and stop replicas sharing a database URL and a Redis key prefix."""

    def __init__(self, tmp_path: Path, database_url: str, **env: str) -> None:
        self.tmp_path = tmp_path
        self.prefix = f"toolscout-test-{uuid.uuid4().hex[:8]}"
        self.env = {
            "TOOLSCOUT_DB__URL": database_url,
            "TOOLSCOUT_CLUSTER__REDIS_URL": REDIS_URL,
            "TOOLSCOUT_CLUSTER__KEY_PREFIX": self.prefix,
            "TOOLSCOUT_DEMO_CATALOG": "false",
            "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
            "TOOLSCOUT_LOG_LEVEL": "INFO",
            **env,
        }
        self.replicas: list[Replica] = []

    def start(self, count: int, timeout: float = 120.0, together: bool = False) -> list[Replica]:
        """Start `count` more replicas and wait until each answers /readyz (with Redis connected, if it has one).

        The first replica of a group starts alone unless `together`: it migrates the new database."""
        started = []
        for _ in range(count):
            name = f"r{len(self.replicas)}"
            replica = Replica(name, free_port(), self.tmp_path / name)
            replica.data_dir.mkdir(parents=True)
            self._launch(replica)
            self.replicas.append(replica)
            started.append(replica)
            if len(self.replicas) == 1 and not together:
                self._wait_ready(replica, timeout)
        for replica in started:
            self._wait_ready(replica, timeout)
        return started

    def restart(self, replica: Replica, timeout: float = 120.0) -> None:
        """Start a stopped replica again on its data folder and port (what it spilled is replayed) and wait."""
        assert replica.process is not None and replica.process.poll() is not None, "the replica still runs"
        self._launch(replica)
        self._wait_ready(replica, timeout)

    def _launch(self, replica: Replica) -> None:
        name = replica.name
        env = {
            **os.environ,
            **self.env,
            "PYTHONPATH": str(ROOT),
            "TOOLSCOUT_DATA_DIR": str(replica.data_dir),
            "TOOLSCOUT_CLUSTER__REPLICA_ID": f"{self.prefix}-{name}",
        }
        command = [
            sys.executable,
            "-c",
            "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))",
            "--log-level",
            "INFO",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(replica.port),
        ]
        with replica.log.open("ab") as log:
            replica.process = subprocess.Popen(
                command, env=env, cwd=replica.data_dir, stdout=log, stderr=subprocess.STDOUT
            )

    def _wait_ready(self, replica: Replica, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert replica.process is not None
            if replica.process.poll() is not None:
                raise RuntimeError(f"replica {replica.name} exited:\n{replica.log_text()[-4000:]}")
            try:
                body = httpx.get(f"{replica.url}/readyz", timeout=2).json()
                wanted = "ok" if self.env["TOOLSCOUT_CLUSTER__REDIS_URL"] else "not configured"
                if body.get("status") == "ready" and body["checks"].get("redis") == wanted:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"replica {replica.name} not ready in {timeout} s:\n{replica.log_text()[-4000:]}")

    def stop(self) -> None:
        """Stop every replica (SIGTERM, then SIGKILL)."""
        for replica in self.replicas:
            if replica.process is not None and replica.process.poll() is None:
                replica.process.terminate()
        for replica in self.replicas:
            if replica.process is not None:
                stop_process(replica.process, 40)


def rows(database_url: str, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """The rows of a query on the replicas' database, read directly."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return [tuple(r) for r in connection.execute(text(query), params)]
    finally:
        engine.dispose()


@contextmanager
def split_replicas(tmp_path: Path) -> Iterator[tuple[Cluster, str, DatabaseLink]]:
    """Two replicas sharing a spill folder and the test echo server: r0 reaches a fresh PostgreSQL database
    directly, r1 through a link the test cuts. Yields the replicas, the database's URL and the link."""
    servers = tmp_path / "servers.json"
    servers.write_text(
        json.dumps({"mcpServers": {"echoer": {"command": sys.executable, "args": [str(TEST_SERVER), "stdio"]}}})
    )
    link = DatabaseLink()
    with fresh_database() as url:
        env = {
            **BUSY_REPLICAS,
            "TOOLSCOUT_EXECUTION__SERVERS_FILE": str(servers),
            "TOOLSCOUT_DB__TIMEOUT_SECONDS": "3",
            "TOOLSCOUT_DB__SPILL_DIR": str(tmp_path / "spill"),
            # One ONNX export for every replica (written atomically): each data folder's own costs ~25 s here.
            "TOOLSCOUT_EMBEDDING__MODELS_DIR": str(tmp_path / "models"),
        }
        group = Cluster(tmp_path, url, **env)
        try:
            group.start(1)
            group.env["TOOLSCOUT_DB__URL"] = link.url(url)
            group.start(1)
            group.env["TOOLSCOUT_DB__URL"] = url
            yield group, url, link
        finally:
            link.restore()
            group.stop()
