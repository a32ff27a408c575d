"""Console sessions: the web console's API key, exchanged once for a server-side session behind an HttpOnly cookie.

The console posts the pasted key to `POST /console/api/session` and gets a cookie holding a random 256-bit session
id: `HttpOnly` (no script in the page can read it), `SameSite=Strict`, `Path=/console/api` (the console's API
calls go there, see service/console/session.py; the REST API at the root never honours it), `Secure` over https,
expiring with the session. The browser never keeps the key. The database keeps the SHA-256 of the id (like the
keys themselves, so a dump of the table opens nothing), the key it acts as and two times, so every replica knows
every session. A session is its key: the same caller, roles and rate-limit bucket, and it ends when the key is
revoked (the lookup joins the active key; revoke_key deletes the key's sessions), after
`console.session_idle_seconds` without a request, `console.session_max_seconds` after the sign-in, at sign-out,
or when the key signs in past `console.max_sessions_per_key` sessions (its oldest ends first).

Cross-site requests: SameSite=Strict keeps the cookie off requests from other sites, but not from other origins of
the same site (another port of the same host, a sibling subdomain). So the cookie counts only on a request that
carries the console's `X-Toolscout-Console: 1` header (a form cannot send one, and a script of another origin
only after a CORS preflight that nothing here answers for it), whose `Sec-Fetch-Site`, when sent, is
`same-origin`, and whose `Origin`, when sent, is this host. Anything else carrying the cookie gets 403 (GET too:
every console request sends the header). Sign-in and sign-out need the same, so no page can sign a browser in or
out either."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import Request
from sqlalchemy import delete, or_, select, update

from service.db.models import ApiKey, ConsoleSession, as_utc, utcnow
from service.errors import CrossSiteRequest, Unauthorized
from service.policy.callers import Caller
from service.policy.keys import key_resolver

if TYPE_CHECKING:
    from service.resources import Resources

COOKIE = "toolscout_console"
COOKIE_PATH = "/console/api"
HEADER = "X-Toolscout-Console"
# The console's middleware marks the requests under /console/api with this scope key: only they may use the cookie.
SCOPE_MARK = "toolscout.console"
# A session's last use is written at most this often (and at most every quarter of the idle time).
TOUCH_SECONDS = 60.0


def hash_session(session_id: str) -> str:
    """Session ids are 256-bit random strings: one SHA-256 stores them safely."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "?"


def is_console_request(request: Request) -> bool:
    return bool(request.scope.get(SCOPE_MARK))


def presented_session(request: Request) -> str | None:
    """The session id of the console cookie, on the console's own paths only."""
    if not is_console_request(request):
        return None
    value = request.cookies.get(COOKIE, "").strip()
    return value or None


def refuse_cross_site(request: Request) -> None:
    """403 unless the request comes from the console's own page (see the module's docstring)."""
    headers = request.headers
    if headers.get(HEADER) != "1":
        raise CrossSiteRequest(
            f"A console session is used only by the console's own requests (they send `{HEADER}: 1`); "
            "scripts send `Authorization: Bearer <key>`"
        )
    site = headers.get("sec-fetch-site")
    if site is not None and site.lower() != "same-origin":
        raise CrossSiteRequest(f"A console session is not used from another origin (Sec-Fetch-Site: {site})")
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
        raise CrossSiteRequest("A console session is not used from another origin (Origin is not this host)")


@dataclass(frozen=True)
class OpenedSession:
    """A new session: the id goes into the cookie once and only its hash is stored."""

    session_id: str
    caller: Caller
    max_age: int
    expires_at: datetime


def lifetimes(resources: Resources) -> tuple[timedelta, timedelta]:
    """(idle, absolute) lifetime of a session, as configured now."""
    console = resources.settings.console
    return timedelta(seconds=console.session_idle_seconds), timedelta(seconds=console.session_max_seconds)


def cookie_secure(resources: Resources, request: Request) -> bool:
    """The cookie's Secure flag: `console.cookie_secure`, "auto" following the request's scheme."""
    mode = resources.settings.console.cookie_secure
    return mode == "always" or (mode == "auto" and request.url.scheme == "https")


async def open_session(resources: Resources, request: Request, key: str | None) -> OpenedSession:
    """Exchange a key for a new session (the sign-in): the key is checked like on any request (failed-attempt
    delays and its rate limit included); a session the browser already had ends, and expired ones are purged."""
    refuse_cross_site(request)
    if not key:
        raise Unauthorized("Sign in with an API key: send it as `key` in the body or as `Authorization: Bearer`")
    caller = await key_resolver(resources).resolve(key, client_address(request))
    if caller.key_id is None:  # an open caller has no key to act as
        raise Unauthorized("The API key is unknown or revoked")
    idle, absolute = lifetimes(resources)
    now = utcnow()
    session_id = secrets.token_urlsafe(32)
    old = presented_session(request)
    async with resources.session() as session:
        stale = or_(ConsoleSession.created_at < now - absolute, ConsoleSession.last_seen_at < now - idle)
        if old is not None:
            stale = or_(stale, ConsoleSession.id_hash == hash_session(old))
        await session.execute(delete(ConsoleSession).where(stale).execution_options(synchronize_session=False))
        digest = hash_session(session_id)
        session.add(ConsoleSession(id_hash=digest, key_id=caller.key_id, created_at=now, last_seen_at=now))
        await session.flush()
        # Past the key's bound its oldest sessions end: signing in at the rate limit would keep thousands.
        kept = (
            select(ConsoleSession.id_hash)
            .where(ConsoleSession.key_id == caller.key_id)
            .order_by((ConsoleSession.id_hash == digest).desc(), ConsoleSession.created_at.desc())
            .limit(resources.settings.console.max_sessions_per_key)
        )
        oldest = delete(ConsoleSession).where(
            ConsoleSession.key_id == caller.key_id, ConsoleSession.id_hash.not_in(kept.scalar_subquery())
        )
        await session.execute(oldest.execution_options(synchronize_session=False))
        await session.commit()
    return OpenedSession(session_id, caller, int(absolute.total_seconds()), now + absolute)


async def session_caller(resources: Resources, request: Request) -> Caller | None:
    """The caller of the request's console session; None without a cookie (the request goes on as without a key).

    403 for a cookie on a request that is not the console's own, 401 for a session that is unknown, expired,
    signed out or whose key was revoked; an unknown one is a failed authentication of the address, as a wrong key
    is (429 while the address waits). The caller still has to be charged to its key's rate limit."""
    session_id = presented_session(request)
    if session_id is None:
        return None
    refuse_cross_site(request)
    resolver, address = key_resolver(resources), client_address(request)
    resolver.admit(address)
    digest = hash_session(session_id)
    idle, absolute = lifetimes(resources)
    now = utcnow()
    async with resources.session() as session:
        found = (
            await session.execute(
                select(ConsoleSession, ApiKey)
                .join(ApiKey, ApiKey.id == ConsoleSession.key_id)
                .where(ConsoleSession.id_hash == digest, ApiKey.revoked_at.is_(None))
            )
        ).first()
        resolver.counted(address, found is not None)
        if found is None:
            raise Unauthorized("The console session ended (signed out, expired or its key revoked); sign in again")
        row, key = found
        caller = Caller(key.caller, frozenset(key.roles or ()), key.id)
        last_seen = as_utc(row.last_seen_at)
        if as_utc(row.created_at) + absolute <= now or last_seen + idle <= now:
            await session.execute(delete(ConsoleSession).where(ConsoleSession.id_hash == digest))
            await session.commit()
            raise Unauthorized("The console session expired; sign in again")
        if now - last_seen >= min(timedelta(seconds=TOUCH_SECONDS), idle / 4):
            await session.execute(
                update(ConsoleSession)
                .where(ConsoleSession.id_hash == digest, ConsoleSession.last_seen_at < now)
                .values(last_seen_at=now)
                .execution_options(synchronize_session=False)  # the loaded row is not used again
            )
            await session.commit()
    return caller


async def close_session(resources: Resources, request: Request) -> None:
    """Sign-out: delete the request's session (there may be none left; the cookie is cleared either way). An
    unknown one counts as a failed authentication, so forged cookies cost no more queries here than elsewhere."""
    session_id = presented_session(request)
    refuse_cross_site(request)
    if session_id is None:
        return
    resolver, address = key_resolver(resources), client_address(request)
    resolver.admit(address)
    async with resources.session() as session:
        deleted = await session.execute(
            delete(ConsoleSession).where(ConsoleSession.id_hash == hash_session(session_id))
        )
        await session.commit()
    resolver.counted(address, bool(getattr(deleted, "rowcount", 0)))
