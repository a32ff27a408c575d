"""Requests that find a cached key answer expired share one query for it.

At each expiry of the key cache (`policy.key_cache_seconds`), every request that arrived before the first query
returned sent its own: keyless requests, which anyone can send, each asked whether any key exists, and the
requests of one busy key each looked it up. A burst at that moment took a pool connection per request; with the
database slow, the pool ran dry and every caller got 503s."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel

from service.policy import keys as auth
from tests.security.conftest import bearer, statements


async def burst(http: Any, headers: dict[str, str], count: int = 20) -> list[int]:
    codes: list[int] = []

    async def one() -> None:
        codes.append((await http.get("/tools", headers=headers)).status_code)

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return codes


async def test_keyless_requests_at_an_expiry_ask_once_whether_a_key_exists(world: dict[str, Any]) -> None:
    app, http = world["app"], world["http"]
    auth.key_resolver(app.state.resources).invalidate()  # the cache expired
    with statements(app, lambda sql: "api_keys" in sql) as seen:
        codes = await burst(http, {})
    assert codes == [401] * 20
    assert len(seen) == 1, seen  # was one a request


async def test_one_keys_requests_at_an_expiry_look_it_up_once(world: dict[str, Any]) -> None:
    app, http, admin = world["app"], world["http"], world["admin"]
    auth.key_resolver(app.state.resources).invalidate()
    with statements(app, lambda sql: "key_hash" in sql) as seen:
        codes = await burst(http, bearer(admin))
    assert codes == [200] * 20
    assert len(seen) == 1, seen


async def test_a_request_after_a_revocation_does_not_join_a_read_from_before_it(world: dict[str, Any]) -> None:
    """Shared by generation: a revocation (an invalidation) starts a new read for the lookups after it."""
    app, admin = world["app"], world["admin"]
    resolver = auth.key_resolver(app.state.resources)
    resolver.invalidate()
    with statements(app, lambda sql: "key_hash" in sql) as seen:
        first = asyncio.ensure_future(resolver.lookup(admin))
        with anyio.fail_after(10):
            while not seen:  # noqa: ASYNC110 (the statement hook is SQLAlchemy's, no event to wait on): its query is sent
                await anyio.lowlevel.checkpoint()
        resolver.invalidate()
        second = await resolver.lookup(admin)
        assert (await first) == second
    assert len(seen) == 2, seen
