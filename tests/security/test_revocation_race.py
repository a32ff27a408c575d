"""A key revoked while one of its requests is looking it up: the revocation still holds from the next request on.

`DELETE /keys/{id}` says the key stops working at once, and forgets every cached key. A lookup of the key that read
its row before the revocation committed and stored its answer after the cache was cleared put the key back: the
next requests of the revoked key were served for `policy.key_cache_seconds` (5 s) more."""

from __future__ import annotations

from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncSession

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
