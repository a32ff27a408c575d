"""A key revoked while one of its requests is looking it up: the revocation still holds from the next request on.

`DELETE /keys/{id}` says the key stops working at once, and forgets every cached key. A lookup of the key that read
its row before the revocation committed and stored its answer after the cache was cleared put the key back: the
next requests of the revoked key were served for `policy.key_cache_seconds` (5 s) more."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.embedding import HashingEmbedder
from service.db.models import ApiKey, utcnow
from service.main import create_app
from service.settings import ClusterSettings
from tests.conftest import make_settings, missing_extra
from tests.processes import free_port, stop_process, wait_for_port
from tests.security.conftest import bearer, cli_key


class Gate:
    """The first session that reads a key by its hash stops when it closes until `opened` (the database answered
    the read, then took its time to release the connection), and says so with `reached`."""

    def __init__(self) -> None:
        self.reached, self.opened = anyio.Event(), anyio.Event()
        self.armed = False


def slow_after_key_read(gate: Gate) -> type[AsyncSession]:
    class SlowAfterKeyRead(AsyncSession):
        async def scalars(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
            result = await super().scalars(statement, *args, **kwargs)
            if gate.armed and "key_hash" in str(statement):
                gate.armed = False
                self.info["held"] = True
            return result

        async def close(self) -> None:
            await super().close()
            if self.info.pop("held", False):
                gate.reached.set()
                await gate.opened.wait()

    return SlowAfterKeyRead


async def test_a_lookup_in_flight_during_a_revocation_does_not_keep_the_key(world: dict[str, Any]) -> None:
    app, http, admin = world["app"], world["http"], world["admin"]
    assert (await http.get("/tools", headers=bearer(admin))).status_code == 200  # the admin's key is cached
    key = await cli_key(app, "leaving-agent", ["dev"])
    listed = (await http.get("/keys", headers=bearer(admin))).json()["keys"]
    key_id = next(k["id"] for k in listed if k["caller"] == "leaving-agent")

    gate = Gate()
    maker = app.state.resources.sessionmaker
    maker.class_, plain = slow_after_key_read(gate), maker.class_
    answers: list[int] = []
    try:

        async def in_flight() -> None:
            answers.append((await http.get("/tools", headers=bearer(key))).status_code)

        async with anyio.create_task_group() as tg:
            gate.armed = True
            tg.start_soon(in_flight)
            with anyio.fail_after(10):
                await gate.reached.wait()  # the key's row was read: active
            response = await http.delete(f"/keys/{key_id}", headers=bearer(admin))
            assert response.status_code == 200, response.text
            gate.opened.set()
    finally:
        gate.opened.set()
        maker.class_ = plain

    assert answers == [200]  # asked before the revocation: it may be answered
    after = await http.get("/tools", headers=bearer(key))
    assert after.status_code == 401, after.text  # was 200 for 5 s more: the lookup cached it after the revocation
    assert after.json()["detail"] == "The API key is unknown or revoked"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis server of this test alone (the test kills its connections; the shared one serves other tests)."""
    server = shutil.which("redis-server")
    if server is None:
        missing_extra("redis-server is not installed")
    port = free_port()
    command = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    log = (tmp_path / "redis.log").open("wb")
    process = subprocess.Popen([*command, "--dir", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, process, 20, "the private Redis", tmp_path / "redis.log")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(process)
        log.close()


async def test_a_replica_back_on_redis_forgets_the_keys_it_cached(tmp_path: Path, private_redis: str) -> None:
    """Another replica's revocation reaches this one as a Redis event; one published while this replica's
    subscription was down is lost (Redis keeps no pub/sub message). The reconnection caught up the catalog from SQL
    but kept every cached key: a key revoked meanwhile went on working here for `policy.key_cache_seconds`."""
    settings = make_settings(tmp_path, cluster=ClusterSettings(redis_url=private_redis, redis_timeout_seconds=0.5))
    settings.policy.key_cache_seconds = 300.0  # an operator's choice: revocations over the API reach every replica
    app = create_app(settings, embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as http:
            await cli_key(app, "root", ["admin"])
            key = await cli_key(app, "leaving-agent", ["dev"])
            assert (await http.get("/tools", headers=bearer(key))).status_code == 200  # cached here

            bus = app.state.resources.cluster.bus
            reconnected = anyio.Event()

            async def on_connect() -> None:
                reconnected.set()

            bus.on_connect(on_connect)
            # Redis restarts (its clients cut), and another replica revokes the key meanwhile: the event is lost.
            killer = Redis.from_url(private_redis)
            try:
                await killer.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            finally:
                await killer.aclose()
            async with app.state.resources.session() as session:
                await session.execute(
                    update(ApiKey).where(ApiKey.caller == "leaving-agent").values(revoked_at=utcnow())
                )
                await session.commit()
            with anyio.fail_after(20):
                await reconnected.wait()

            after = await http.get("/tools", headers=bearer(key))
    assert after.status_code == 401, after.text  # was 200, for up to key_cache_seconds (here 300 s) more
