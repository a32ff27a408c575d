"""Who is calling: API keys (stored as SHA-256 hashes, bound to a caller and roles) and the open local user.

With no key in the database the service serves one local admin without authentication (and says so at
start); once a key has been created every route that depends on the caller needs one, even after every key
is revoked. Each resolved request also takes a token from its key's rate-limit bucket."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.models import ApiKey, ConsoleSession, Search, as_utc, utcnow
from service.db.shared_reads import SharedReads
from service.errors import InvalidRequest, NotFound, RateLimited, Unauthorized, body_pointer, counted
from service.policy.callers import OPEN_CALLER, Caller
from service.policy.ratelimit import RateLimiter, TokenBucketLimiter
from service.security.auth_failures import FailedAuthLimiter
from service.security.openmode import open_mode_allowed

if TYPE_CHECKING:
    from service.resources import Resources

logger = logging.getLogger(__name__)

KEY_PREFIX = "tsk_"
SHOWN_PREFIX_CHARS = 12


def hash_key(key: str) -> str:
    """Keys are 256-bit random strings, so one SHA-256 is enough to store them safely."""
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class CreatedKey:
    """A new key: the secret is shown once, only its hash is stored."""

    id: str
    key: str
    prefix: str
    caller: str
    roles: tuple[str, ...]


MAX_ROLE_CHARS = 64
# A caller's sorted roles joined by commas are the permission scope its searches are logged and learned in
# (usage.signal.scope_key, the searches' `scope` column).
MAX_SCOPE_CHARS = int(Search.__table__.c.scope.type.length)


def _role_problem(role: str) -> str | None:
    """Why this text cannot be a role, or None."""
    if not role.strip():
        return "blank"
    if len(role) > MAX_ROLE_CHARS:
        return f"longer than {MAX_ROLE_CHARS} characters"
    if "," in role:
        return "a comma (roles are joined by commas into the permission scope)"
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in role):
        return "a control character"
    return None


def checked_roles(roles: Sequence[str]) -> list[str]:
    """A key's roles, each once and sorted; InvalidRequest names the first that cannot be one, or the lot when
    their scope would not fit its column."""
    for index, role in enumerate(roles):
        if (reason := _role_problem(role)) is not None:
            raise InvalidRequest(
                f"{role[:MAX_ROLE_CHARS]!r} cannot be a role: {reason}",
                errors=[{"pointer": body_pointer("roles", index), "reason": reason}],
            )
    distinct = sorted(set(roles))
    if len(",".join(distinct)) > MAX_SCOPE_CHARS:
        reason = f"at most {MAX_SCOPE_CHARS} characters joined by commas"
        raise InvalidRequest(
            f"A key's roles take {reason}", errors=[{"pointer": body_pointer("roles"), "reason": reason}]
        )
    return distinct


async def create_key(session: AsyncSession, caller: str, roles: Sequence[str]) -> CreatedKey:
    """Store a new key for a caller (the session's owner commits)."""
    if not caller.strip() or len(caller) > 128:
        raise InvalidRequest(
            "caller must be 1-128 characters, not blank",
            errors=[{"pointer": body_pointer("caller"), "reason": "blank or too long"}],
        )
    roles = checked_roles(roles)
    key = generate_key()
    row = ApiKey(
        id=str(uuid.uuid4()),
        key_hash=hash_key(key),
        prefix=key[:SHOWN_PREFIX_CHARS],
        caller=caller.strip(),
        roles=roles,
    )
    session.add(row)
    await session.flush()
    return CreatedKey(row.id, key, row.prefix, row.caller, tuple(row.roles))


async def list_keys(session: AsyncSession, include_revoked: bool = False) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    return list((await session.scalars(query)).all())


async def revoke_key(session: AsyncSession, key_id_or_prefix: str) -> ApiKey:
    """Revoke a key by id or by its shown prefix (which must be unambiguous); its console sessions end with it."""
    row = await session.get(ApiKey, key_id_or_prefix)
    if row is None:
        rows = (
            await session.scalars(select(ApiKey).where(ApiKey.prefix == key_id_or_prefix, ApiKey.revoked_at.is_(None)))
        ).all()
        if len(rows) != 1:
            raise NotFound(f"No single active key with id or prefix {key_id_or_prefix!r}", key=key_id_or_prefix)
        row = rows[0]
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    await session.execute(delete(ConsoleSession).where(ConsoleSession.key_id == row.id))
    return row


def key_view(row: ApiKey) -> dict[str, object]:
    """The public shape of a stored key (never the hash)."""
    return {
        "id": row.id,
        "prefix": row.prefix,
        "caller": row.caller,
        "roles": list(row.roles),
        "created_at": as_utc(row.created_at).isoformat() if row.created_at else None,
        "revoked_at": as_utc(row.revoked_at).isoformat() if row.revoked_at else None,
    }


class KeyResolver:
    """Resolves presented keys against the database through a small in-process cache."""

    def __init__(self, resources: Resources) -> None:
        policy = resources.settings.policy
        self.resources = resources
        self.ttl = policy.key_cache_seconds
        self.open_allowed = open_mode_allowed(resources.settings)
        # With several replicas cluster.runtime.start_cluster swaps in the shared Redis buckets and `on_change`.
        self.limiter: RateLimiter = TokenBucketLimiter(policy.rate_limit_per_minute, policy.rate_limit_burst)
        self.on_change: Callable[[], Awaitable[None]] | None = None
        self.failures = FailedAuthLimiter(policy.auth_failures_free, policy.auth_failure_max_delay_seconds)
        self._cache: OrderedDict[str, tuple[Caller | None, float]] = OrderedDict()
        self._keys_exist: tuple[bool, float] | None = None
        self._active: OrderedDict[str, tuple[bool, float]] = OrderedDict()  # key id -> unrevoked, until
        self.generation = 0  # counts invalidations: a holder of a long-lived answer checks its key again after one
        # Requests that find the same entry expired share its query; keyed by generation, so a request after an
        # invalidation never joins a read that began before it.
        self._reads = SharedReads()

    def invalidate(self) -> None:
        """Forget cached keys (after a key is created or revoked in this process)."""
        self._cache.clear()
        self._active.clear()
        self._keys_exist = None
        self.generation += 1

    def _seen_active(self, caller: Caller | None, until: float) -> None:
        """A key just resolved is unrevoked for as long as its cached resolution (`still_active` asks no query)."""
        if caller is not None and caller.key_id is not None:
            self._keep_active(caller.key_id, True, until)

    def _keep_active(self, key_id: str, active: bool, until: float) -> None:
        self._active[key_id] = (active, until)
        self._active.move_to_end(key_id)
        while len(self._active) > 10_000:
            self._active.popitem(last=False)

    async def require_active(self, caller: Caller) -> None:
        """401 when the key a caller was resolved from has been revoked since: work that outlives its request
        (a script's calls, a batch's) stops with the key."""
        if not await self.still_active(caller):
            raise Unauthorized("The API key was revoked while this request ran")

    async def still_active(self, caller: Caller) -> bool:
        """Whether the key a caller was resolved from is still unrevoked (the open caller has none: always);
        cached like presented keys, so the streams of one key cost one query per `key_cache_seconds`."""
        if caller.key_id is None:
            return True
        now = time.monotonic()
        cached = self._active.get(caller.key_id)
        if cached is not None and cached[1] > now:
            return cached[0]
        key_id, generation = caller.key_id, self.generation

        async def read() -> bool:
            async with self.resources.session() as session:
                found = await session.scalar(select(ApiKey.id).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)))
            if generation == self.generation:  # no key changed meanwhile: the answer may be kept
                self._keep_active(key_id, found is not None, now + self.ttl)
            return found is not None

        return await self._reads.read(("active", key_id, generation), read)

    async def changed(self) -> None:
        """A key was created or revoked here: forget cached keys in this process and, through `on_change`, on
        every other replica."""
        self.invalidate()
        if self.on_change is not None:
            await self.on_change()

    async def keys_exist(self) -> bool:
        """Whether any key was ever created: revoking every key must not reopen the service to anyone."""
        now = time.monotonic()
        if self._keys_exist is not None and self._keys_exist[1] > now:
            return self._keys_exist[0]
        generation = self.generation

        async def read() -> bool:
            async with self.resources.session() as session:
                found = (await session.scalars(select(ApiKey.id).limit(1))).first()
            if generation == self.generation:
                self._keys_exist = (found is not None, now + self.ttl)
            return found is not None

        return await self._reads.read(("exist", generation), read)

    async def lookup(self, key: str) -> Caller | None:
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            self._seen_active(cached[0], cached[1])
            return cached[0]
        generation = self.generation

        async def read() -> Caller | None:
            async with self.resources.session() as session:
                row = (
                    await session.scalars(select(ApiKey).where(ApiKey.key_hash == digest, ApiKey.revoked_at.is_(None)))
                ).first()
            caller = Caller(row.caller, frozenset(row.roles or ()), row.id) if row is not None else None
            if generation != self.generation:
                # A key was revoked (or made) while this read was in flight: its answer may predate the
                # revocation, and cached it would keep a revoked key working for `ttl` after DELETE /keys said
                # it stopped.
                return caller
            self._cache[digest] = (caller, now + self.ttl)
            self._seen_active(caller, now + self.ttl)
            while len(self._cache) > 10_000:
                self._cache.popitem(last=False)
            return caller

        return await self._reads.read(("key", digest, generation), read)

    def admit(self, address: str) -> None:
        """429 while this address waits after failed authentications: a guesser of keys or of console sessions
        waits before its next guess is even looked up, so wrong guesses cost time, not queries."""
        if (wait := self.failures.wait(address)) > 0:
            raise RateLimited("Too many failed authentications from this address", retry_after=wait)

    def counted(self, address: str, found: bool) -> None:
        """Record a credential this address presented that was not found (one found forgets no failure)."""
        if not found:
            self.failures.failed(address)

    async def resolve(self, presented: str | None, address: str = "?", authorization: str | None = None) -> Caller:
        """The caller of a presented key; `authorization`, the request's Authorization header, says why a key was
        not read from it (never quoted: a key sent without `Bearer ` is its whole value)."""
        if presented:
            self.admit(address)
            caller = await self.lookup(presented)
            self.counted(address, caller is not None)
            if caller is None:
                raise Unauthorized("The API key is unknown or revoked")
        elif await self.keys_exist():
            if authorization and authorization.strip():  # `Authorization: tsk_...` or `Basic ...`: read as no key
                raise Unauthorized(
                    "An API key is required: the Authorization header is not `Bearer <key>` (write `Bearer ` before "
                    "the key, or send it as `X-API-Key`)"
                )
            raise Unauthorized("An API key is required: send `Authorization: Bearer <key>` or `X-API-Key`")
        elif self.open_allowed:
            caller = OPEN_CALLER
        else:
            raise Unauthorized("No API key exists and open mode is off; create one with `toolscout keys create`")
        return await self.charge(caller)

    async def charge(self, caller: Caller) -> Caller:
        """Take a token from the caller's bucket: its key's (a console session shares its key's bucket), or the
        open user's."""
        wait = await self.limiter.acquire_async(caller.key_id or caller.id)
        if wait > 0:
            raise RateLimited(
                f"Rate limit of {counted(self.limiter.rate * 60, 'request')} per minute exceeded", retry_after=wait
            )
        return caller

    def search_cost(self, query: str) -> int:
        """Tokens a search of this query takes: one per started `policy.search_chars_per_token` characters, at
        most the burst (a search the bucket cannot hold could never be paid for)."""
        per_token = self.resources.settings.policy.search_chars_per_token
        tokens = -(-len(query) // per_token) if per_token > 0 else 1
        return max(1, min(tokens, int(self.limiter.burst)))

    def body_cost(self, size: int) -> int:
        """Tokens a request body of `size` bytes takes, its request's own token included: one per started
        `policy.body_kib_per_token` KiB, at most the burst (a body the bucket cannot hold could never be paid for)."""
        per_token = self.resources.settings.policy.body_kib_per_token * 1024
        tokens = -(-size // per_token) if per_token > 0 else 1
        return max(1, min(tokens, int(self.limiter.burst)))

    async def _take_beyond_first(self, caller: Caller, cost: int) -> float:
        """Take the tokens a request costs beyond the one it took at its key check; the wait before they would be
        there (0: taken)."""
        return await self.limiter.acquire_async(caller.key_id or caller.id, cost - 1) if cost > 1 else 0.0

    async def charge_body(self, caller: Caller, size: int) -> int:
        """Take what a body of `size` bytes costs beyond the token its request took, before it is parsed: parsing
        holds the GIL, so one key's flood of 1.9 MB bodies held every other caller's request (an admin's /execute
        waited 2.4 s). Returns the tokens the request has taken in all."""
        cost = self.body_cost(size)
        if (wait := await self._take_beyond_first(caller, cost)) > 0:
            per_token = self.resources.settings.policy.body_kib_per_token
            raise RateLimited(
                f"A request body of {size:,} bytes costs {counted(cost, 'rate-limit token')} (one per "
                f"{per_token:,} KiB begun, policy.body_kib_per_token) and the key's bucket holds too few now",
                # Sent again, the request takes its own token first: told only when the rest would be there, a
                # client waiting exactly that long was refused again, each time.
                retry_after=wait + 1 / self.limiter.rate,
                limit="policy.body_kib_per_token",
                cost=cost,
            )
        return cost

    async def charge_search(self, caller: Caller, query: str) -> None:
        """Take what a search costs beyond the token its request took: a long query embeds up to 8 parts, so a flood
        of them meets the key's limit sooner than one of short queries costing as much CPU."""
        cost = self.search_cost(query)
        if (wait := await self._take_beyond_first(caller, cost)) > 0:
            per_token = self.resources.settings.policy.search_chars_per_token
            raise RateLimited(
                f"A search of {counted(len(query), 'character')} costs {counted(cost, 'rate-limit token')} (one per "
                f"{per_token:,} characters, policy.search_chars_per_token) and the key's bucket holds too few now",
                retry_after=wait,
                limit="policy.search_chars_per_token",
                cost=cost,
            )


def key_resolver(resources: Resources) -> KeyResolver:
    """The app's resolver, created on first use."""
    if resources.keys is None:
        resources.keys = KeyResolver(resources)
    return resources.keys


def presented_key(request: Request) -> str | None:
    """The key of `Authorization: Bearer <key>` or of `X-API-Key`."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key and key.strip() else None
