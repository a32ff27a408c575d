"""A restricted caller's GET /servers and /servers/{id} cost what its own servers cost. Both built every server's
view, with a count of every server's tools and their held tools, and kept the caller's: among 4,000 servers it may
not use, a dev's GET /servers took 161 ms against 9 ms without them (medians of 40, in process), telling it how
many there are; now 1.8 ms. The answers are what they were."""

from __future__ import annotations

from typing import Any

from tests.security.conftest import assert_problem, bearer, statements


async def test_a_restricted_callers_servers_read_its_own_servers_only(world: dict[str, Any]) -> None:
    http, admin, dev, app = world["http"], world["admin"], world["dev"], world["app"]
    hidden = [{"server": f"hidden{i}", "name": "t", "description": "A tool of another team"} for i in range(300)]
    assert (await http.post("/tools", json={"tools": hidden}, headers=bearer(admin))).status_code == 200
    await http.get("/tools", headers=bearer(dev))  # the policy takes in the new tools (once per change)
    with statements(app, lambda sql: "FROM tools" in sql or "FROM servers" in sql) as read:
        listed = await http.get("/servers", headers=bearer(dev))
        one = await http.get("/servers/public", headers=bearer(dev))
        other = await http.get("/servers/hidden7", headers=bearer(dev))
    assert listed.json() == {
        "servers": [
            {"id": "public", "state": "catalog", "tools": 1, "last_sync_at": None},
            {"id": "util", "state": "catalog", "tools": 1, "last_sync_at": None},
        ]
    }
    assert one.json() == listed.json()["servers"][0] and other.status_code == 404
    assert not [sql for sql in read if "FROM tools" in sql], read  # no count of every server's tools
    assert all("WHERE servers.id" in sql for sql in read if "FROM servers" in sql), read  # its servers only
    everything = (await http.get("/servers", headers=bearer(admin))).json()["servers"]
    assert len(everything) == 304 and {"held_tools", "config"} <= set(everything[0])


async def test_an_unknown_server_names_the_closest_servers_the_caller_may_see(world: dict[str, Any]) -> None:
    """`GET /servers/tim` said "No server named 'tim'" and no more; tools' 404s name the closest tools. A restricted
    caller is offered only its own servers: a hidden server, asked by its name or misspelt, reads like a missing one."""
    http, admin, dev = world["http"], world["admin"], world["dev"]
    for path, key, closest in [
        ("/servers/pubilc", admin, ["public"]),
        ("/servers/vaul", admin, ["vault"]),
        ("/servers/Payroll", admin, ["payroll"]),
        ("/servers/utli", dev, ["util"]),
        ("/servers/vaul", dev, []),
        ("/servers/vault", dev, []),
        ("/servers/nothing-like-it", admin, []),
    ]:
        body = assert_problem(await http.get(path, headers=bearer(key)), 404, "not-found")
        asked = path.rsplit("/", 1)[1]
        hint = f"; closest: {', '.join(closest)}" if closest else ""
        assert (body["detail"], body["server"], body["closest"]) == (f"No server named {asked!r}{hint}", asked, closest)
    hidden = (await http.get("/servers/vault", headers=bearer(dev))).json()
    missing = (await http.get("/servers/vaulx", headers=bearer(dev))).json()
    assert {k: v for k, v in hidden.items() if k not in ("detail", "server", "instance")} == {
        k: v for k, v in missing.items() if k not in ("detail", "server", "instance")
    }
    removed = assert_problem(await http.delete("/servers/pubic", headers=bearer(admin)), 404, "not-found")
    assert (removed["detail"], removed["closest"]) == ("No server named 'pubic'; closest: public", ["public"])
