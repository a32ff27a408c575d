"""A key revoked while it holds something long-lived: the revocation ends it, as it ends every later request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx

from tests.security.conftest import bearer, serving


async def key_id_of(http: httpx.AsyncClient, admin: str, caller: str) -> str:
    listing = (await http.get("/keys", headers=bearer(admin))).json()["keys"]
    return next(k["id"] for k in listing if k["caller"] == caller)


async def events_after_revocation(
    app: Any, admin: str, dev: str, revoke: Callable[[httpx.AsyncClient], Awaitable[None]], changes: int
) -> tuple[list[str], bool]:
    """The lines the dev key's /events stream received after `revoke` and `changes` new public tools, and whether
    the stream ended (within 5 s)."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        received: list[str] = []
        connected, ended = anyio.Event(), anyio.Event()

        async def follow() -> None:
            async with http.stream("GET", "/events", headers=bearer(dev)) as stream:
                async for line in stream.aiter_lines():
                    received.append(line)
                    if line == ": connected":
                        connected.set()
            ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            with anyio.fail_after(20):
                await connected.wait()
            await revoke(http)
            for n in range(changes):
                tool = {"server": "public", "name": f"fresh_{n}", "description": "A new public tool"}
                assert (await http.post("/tools", json={"tools": [tool]}, headers=bearer(admin))).status_code == 200
            with anyio.move_on_after(5):
                await ended.wait()
            tg.cancel_scope.cancel()
    return [line for line in received if line.startswith("data:")], ended.is_set()


async def test_revoking_a_key_ends_its_event_stream(world: dict[str, Any]) -> None:
    """A dev key's /events stream went on after DELETE /keys: 3 of 3 changes of tools the revoked key had used were
    still delivered, while every other request of that key was a 401."""
    admin, dev = world["admin"], world["dev"]

    async def revoke(http: httpx.AsyncClient) -> None:
        revoked = await http.delete(f"/keys/{await key_id_of(http, admin, 'dev-agent')}", headers=bearer(admin))
        assert revoked.status_code == 200, revoked.text
        assert (await http.get("/tools", headers=bearer(dev))).status_code == 401

    assert await events_after_revocation(world["app"], admin, dev, revoke, changes=3) == ([], True)


async def test_a_key_revoked_by_another_process_ends_its_stream_within_the_key_cache_time(
    world: dict[str, Any],
) -> None:
    """A revocation written to the database only (`toolscout keys revoke` with no admin key and no Redis): no
    replica hears of it, so the stream's key is looked up again once `policy.key_cache_seconds` has passed, as a
    cached key is on every other route."""
    from service.policy.keys import key_resolver, revoke_key

    admin, dev = world["admin"], world["dev"]
    resources = world["app"].state.resources
    key_resolver(resources).ttl = 0.2

    async def revoke(http: httpx.AsyncClient) -> None:
        key_id = await key_id_of(http, admin, "dev-agent")
        async with resources.session() as session:  # the CLI's way: no invalidation in this process
            await revoke_key(session, key_id)
            await session.commit()
        await anyio.sleep(0.5)

    assert await events_after_revocation(world["app"], admin, dev, revoke, changes=1) == ([], True)


async def test_a_script_running_when_its_key_is_revoked_makes_no_further_call(world: dict[str, Any]) -> None:
    """A /run script lives up to code_mode.timeout_seconds (60) and makes up to 50 calls: every one of them went on
    after DELETE /keys (measured: 40 of 40 searches and calls made, the last ones a second after the revocation)."""
    http, admin, dev = world["http"], world["admin"], world["dev"]
    script = """
const seen = [];
for (let i = 0; i < 20; i++) {
  for (let j = 0; j < 600000; j++) {}  // a while between calls, so that the revocation falls inside the run
  for (const call of [() => search_tools('weather', 1), () => tools.public__get_weather({})]) {
    try { await call(); seen.push('ok'); } catch (e) { seen.push(e.status); }
  }
}
return seen;
"""
    answer: dict[str, Any] = {}

    async def run() -> None:
        ran = await http.post("/run", json={"script": script}, headers=bearer(dev))
        answer.update(ran.json())

    key_id = await key_id_of(http, admin, "dev-agent")
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0.3)
        assert (await http.delete(f"/keys/{key_id}", headers=bearer(admin))).status_code == 200
    seen = answer["result"]
    assert "denied" in seen, seen
    first = seen.index("denied")
    assert first > 0 and set(seen[first:]) == {"denied"}, seen
