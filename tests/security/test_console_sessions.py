"""Console sessions over HTTP: the key is exchanged once for an HttpOnly, SameSite=Strict cookie scoped to
/console/api whose id is stored only as a hash; the session acts exactly as its key, counts only on the console's
own requests (a cross-site form or a foreign origin gets 403 problem+json), and ends at sign-out, when its key is
revoked, and when idle or too old. Sessions live in the database, so every replica honours them.
(The browser side, that no script can read the key or the cookie, is tests/browser/test_console_session.py.)"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import select

from service.db.models import ApiKey, ConsoleSession
from service.policy.console_sessions import COOKIE
from tests.security.conftest import (
    assert_problem,
    bearer,
    cli_key,
    count_rows,
    make_settings,
    opened_world,
    running,
)

CONSOLE = {"X-Toolscout-Console": "1"}


async def sign_in(http: httpx.AsyncClient, key: str) -> tuple[str, httpx.Response]:
    """The console's sign-in; returns the session id of the cookie (the client's own cookie jar is emptied, so
    each request below says exactly which cookie it carries)."""
    response = await http.post("/console/api/session", json={"key": key}, headers=CONSOLE)
    assert response.status_code == 200, response.text
    session_id = response.cookies[COOKIE]
    http.cookies.clear()
    return session_id, response


def with_session(session_id: str, **headers: str) -> dict[str, str]:
    """The console's request headers with the session cookie (and any more headers)."""
    return {**CONSOLE, "Cookie": f"{COOKIE}={session_id}", **headers}


async def stored_sessions(app: Any) -> list[ConsoleSession]:
    async with app.state.resources.session() as session:
        return list((await session.scalars(select(ConsoleSession))).all())


async def test_sign_in_sets_an_httponly_strict_cookie_and_stores_only_its_hash(world: dict[str, Any]) -> None:
    app, http, admin = world["app"], world["http"], world["admin"]
    session_id, response = await sign_in(http, admin)
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "path", "samesite", "max-age"} <= attributes and "secure" not in attributes  # plain http
    assert "SameSite=strict" in cookie and "Path=/console/api" in cookie and "Max-Age=28800" in cookie
    assert admin not in cookie and admin not in response.text  # the key is never handed back
    assert response.json()["caller"] == "root" and response.json()["admin"] is True
    [row] = await stored_sessions(app)
    assert row.id_hash == hashlib.sha256(session_id.encode()).hexdigest() and session_id not in str(vars(row))
    me = await http.get("/console/api/me", headers=with_session(session_id))
    assert me.status_code == 200 and me.json()["caller"] == "root"
    # A key is needed: none, or a wrong one, opens no session and sets no cookie.
    assert_problem(await http.post("/console/api/session", json={}, headers=CONSOLE), 401)
    wrong = await http.post("/console/api/session", json={"key": "tsk_wrong"}, headers=CONSOLE)
    assert_problem(wrong, 401)
    assert "set-cookie" not in wrong.headers
    # The Bearer header works for the exchange too.
    assert (await http.post("/console/api/session", headers={**CONSOLE, **bearer(admin)})).status_code == 200
    assert len(await stored_sessions(app)) == 2


async def test_a_session_acts_exactly_as_its_key(world: dict[str, Any]) -> None:
    http, admin, dev = world["http"], world["admin"], world["dev"]
    dev_session, _ = await sign_in(http, dev)
    admin_session, _ = await sign_in(http, admin)
    me = (await http.get("/console/api/me", headers=with_session(dev_session))).json()
    assert (me["caller"], me["roles"], me["admin"]) == ("dev-agent", ["dev"], False)
    assert_problem(await http.get("/console/api/keys", headers=with_session(dev_session)), 403, "permission-denied")
    assert (await http.get("/console/api/keys", headers=with_session(admin_session))).status_code == 200
    query = {"query": "read a secret from the vault", "k": 10}
    by_session = await http.post("/console/api/search", json=query, headers=with_session(dev_session))
    by_key = await http.post("/search", json=query, headers=bearer(dev))
    assert by_session.status_code == 200 and by_key.status_code == 200
    names = [r["name"] for r in by_session.json()["results"]]
    assert names == [r["name"] for r in by_key.json()["results"]] and not any("vault" in n for n in names)
    listed = await http.get("/console/api/tools", params={"limit": 100}, headers=with_session(dev_session))
    assert {t["server"] for t in listed.json()["tools"]} <= {"public", "util"}
    # The cookie counts under /console/api only: the REST API at the root wants a key.
    assert_problem(await http.get("/tools", headers=with_session(admin_session)), 401, "unauthorized")
    # Scripts keep their Bearer key on the console's routes, without the console's header.
    assert (await http.get("/console/api/me", headers=bearer(dev))).json()["caller"] == "dev-agent"
    assert (await http.get("/console/api/keys", headers=bearer(admin))).status_code == 200


async def test_cross_site_requests_with_the_cookie_are_refused(world: dict[str, Any]) -> None:
    app, http, admin = world["app"], world["http"], world["admin"]
    session_id, _ = await sign_in(http, admin)
    cookie = {"Cookie": f"{COOKIE}={session_id}"}
    new_key = {"caller": "csrf", "roles": ["admin"]}
    keys_before = await count_rows(app, ApiKey)
    # A cross-site form post (SameSite=Strict aside: another port of the same host is the same site).
    form = {**cookie, "Origin": "http://localhost:9999", "Sec-Fetch-Site": "same-site"}
    assert_problem(await http.post("/console/api/keys", data=new_key, headers=form), 403, "cross-site-request")
    # No console header: a form, an <img>, a no-cors fetch, whatever the origin says.
    assert_problem(await http.post("/console/api/keys", json=new_key, headers=cookie), 403, "cross-site-request")
    assert_problem(await http.get("/console/api/keys", headers=cookie), 403, "cross-site-request")
    text_plain = {**cookie, "Content-Type": "text/plain", "Origin": "http://localhost"}
    assert_problem(await http.post("/console/api/keys", content=b'{"caller":"csrf"}', headers=text_plain), 403)
    # The header but another origin of this site, or a browser saying the request is not same-origin.
    for extra in (
        {"Origin": "http://localhost:9999"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://localhost"},
        {"Origin": "http://localhost", "Sec-Fetch-Site": "none"},
    ):
        refused = await http.post("/console/api/keys", json=new_key, headers=with_session(session_id, **extra))
        assert_problem(refused, 403, "cross-site-request")
    sandboxed = with_session(session_id, Origin="null")  # refused at the edge already (forbidden-origin)
    assert_problem(await http.post("/console/api/keys", json=new_key, headers=sandboxed), 403)
    other_site = with_session(session_id, **{"Sec-Fetch-Site": "cross-site"})  # no Origin: at the edge too
    assert_problem(await http.post("/console/api/keys", json=new_key, headers=other_site), 403, "forbidden-origin")
    approval = {"approval_id": "00000000-0000-0000-0000-000000000000"}
    assert_problem(await http.post("/console/api/approvals", json=approval, headers=cookie), 403)
    assert_problem(await http.delete("/console/api/keys/x", headers=cookie), 403, "cross-site-request")
    assert await count_rows(app, ApiKey) == keys_before
    # Nor can a page sign a browser in (to the attacker's key) or out.
    assert_problem(await http.post("/console/api/session", json={"key": admin}), 403, "cross-site-request")
    assert_problem(await http.delete("/console/api/session", headers=cookie), 403, "cross-site-request")
    assert len(await stored_sessions(app)) == 1
    # The console's own request: its header, its origin.
    own = with_session(session_id, Origin="http://localhost", **{"Sec-Fetch-Site": "same-origin"})
    created = await http.post("/console/api/keys", json=new_key, headers=own)
    assert created.status_code == 201, created.text
    plain = await http.post("/console/api/keys", json={"caller": "x"}, headers=with_session(session_id))
    assert plain.status_code == 201, plain.text  # a browser too old to send Origin or Sec-Fetch-Site


async def test_sign_out_ends_the_session(world: dict[str, Any]) -> None:
    app, http, admin = world["app"], world["http"], world["admin"]
    session_id, _ = await sign_in(http, admin)
    other, _ = await sign_in(http, admin)
    signed_out = await http.delete("/console/api/session", headers=with_session(session_id))
    assert signed_out.status_code == 204
    cleared = signed_out.headers["set-cookie"]
    assert cleared.startswith(f"{COOKIE}=") and "Max-Age=0" in cleared and "Path=/console/api" in cleared
    http.cookies.clear()
    body = assert_problem(await http.get("/console/api/me", headers=with_session(session_id)), 401, "unauthorized")
    assert "sign in again" in body["detail"]
    assert (await http.get("/console/api/me", headers=with_session(other))).status_code == 200  # only that one
    assert [s.id_hash for s in await stored_sessions(app)] == [hashlib.sha256(other.encode()).hexdigest()]
    assert (await http.delete("/console/api/session", headers=with_session(session_id))).status_code == 204


async def test_a_revoked_keys_sessions_are_refused(world: dict[str, Any]) -> None:
    app, http, admin = world["app"], world["http"], world["admin"]
    created = (await http.post("/keys", json={"caller": "temp", "roles": ["admin"]}, headers=bearer(admin))).json()
    session_id, _ = await sign_in(http, created["key"])
    assert (await http.get("/console/api/keys", headers=with_session(session_id))).status_code == 200
    assert (await http.delete(f"/keys/{created['id']}", headers=bearer(admin))).status_code == 200
    assert_problem(await http.get("/console/api/me", headers=with_session(session_id)), 401, "unauthorized")
    assert_problem(await http.get("/console/api/keys", headers=with_session(session_id)), 401)
    assert await stored_sessions(app) == []  # revoking deleted the key's sessions
    again = await http.post("/console/api/session", json={"key": created["key"]}, headers=CONSOLE)
    assert_problem(again, 401)


async def test_a_session_of_a_key_revoked_behind_its_back_is_refused(world: dict[str, Any]) -> None:
    """Revoked without the API (another replica's old code, a hand edit): the lookup joins the active key."""
    app, http = world["app"], world["http"]
    key = await cli_key(app, "temp", ["admin"])
    session_id, _ = await sign_in(http, key)
    async with app.state.resources.session() as session:
        row = (await session.scalars(select(ApiKey).where(ApiKey.caller == "temp"))).one()
        row.revoked_at = row.created_at
        await session.commit()
    assert_problem(await http.get("/console/api/me", headers=with_session(session_id)), 401, "unauthorized")


async def test_sessions_expire_when_idle_and_when_too_old(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, console={"session_idle_seconds": 1.5, "session_max_seconds": 3.0})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        session_id, response = await sign_in(http, admin)
        assert "Max-Age=3" in response.headers["set-cookie"]
        # Used every 0.4 s it outlives its idle time, but not its absolute lifetime.
        started = time.monotonic()
        statuses: list[tuple[float, int]] = []
        while time.monotonic() - started < 3.6:
            me = await http.get("/console/api/me", headers=with_session(session_id))
            statuses.append((time.monotonic() - started, me.status_code))
            await anyio.sleep(0.4)
        assert all(status == 200 for at, status in statuses if at < 2.7), statuses
        assert statuses[-1][1] == 401 and any(at > 1.5 for at, status in statuses if status == 200), statuses
        # Left alone, a session ends after its idle time.
        idle_id, _ = await sign_in(http, admin)
        assert (await http.get("/console/api/me", headers=with_session(idle_id))).status_code == 200
        await anyio.sleep(1.8)
        body = assert_problem(await http.get("/console/api/me", headers=with_session(idle_id)), 401)
        assert "expired" in body["detail"]
        assert await stored_sessions(app) == []  # an expired session is deleted when it is refused


@pytest.mark.postgres
async def test_a_session_opened_on_one_replica_works_on_another(tmp_path: Path, postgres_url: str) -> None:
    """Two apps on one PostgreSQL database (each with its own data folder and index): replicas."""
    settings = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        settings.append(make_settings(tmp_path / name, permissions=None))
        settings[-1].db.url = postgres_url
    async with running(settings[0]) as (app_a, http_a), running(settings[1]) as (_app_b, http_b):
        admin = await cli_key(app_a, "root", ["admin"])
        session_id, _ = await sign_in(http_a, admin)
        assert (await http_b.get("/console/api/me", headers=with_session(session_id))).json()["caller"] == "root"
        assert (await http_b.delete("/console/api/session", headers=with_session(session_id))).status_code == 204
        assert_problem(await http_a.get("/console/api/me", headers=with_session(session_id)), 401)


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_key_keeps_at_most_max_sessions_the_oldest_end_first(
    request: pytest.FixtureRequest, tmp_path: Path, database: str
) -> None:
    """Each sign-in is a row until it idles out (30 min): a key signing in at its rate limit (600 a minute) kept
    18,000 at once. Past `console.max_sessions_per_key` the oldest end, as a sign-out would."""
    db = {"url": request.getfixturevalue("postgres_url")} if database == "postgres" else {}
    async with opened_world(tmp_path, **({"db": db} if db else {})) as world:
        await _sign_in_past_the_bound(world)


async def _sign_in_past_the_bound(world: dict[str, Any]) -> None:
    app, http, admin, dev = world["app"], world["http"], world["admin"], world["dev"]
    limit = app.state.resources.settings.console.max_sessions_per_key
    assert limit == 20
    ids = [(await sign_in(http, admin))[0] for _ in range(limit + 5)]
    other, _ = await sign_in(http, dev)  # another key's sessions are not counted against this one
    rows = await stored_sessions(app)
    assert len(rows) == limit + 1
    hashes = {row.id_hash for row in rows}
    assert hashes == {hashlib.sha256(s.encode()).hexdigest() for s in [*ids[5:], other]}
    assert (await http.get("/console/api/me", headers=with_session(ids[0]))).status_code == 401
    assert (await http.get("/console/api/me", headers=with_session(ids[5]))).status_code == 200
    assert (await http.get("/console/api/me", headers=with_session(other))).json()["caller"] != "root"
