"""`toolscout keys create | list | revoke`: API keys, written straight to the database.

Works whether the service runs or not; a running service notices new keys within `policy.key_cache_seconds`. A
revocation goes through the running service when it takes the CLI's key (TOOLSCOUT_FRONTEND__API_KEY, an admin's),
which forgets the key at once and tells its replicas; else it is written to the database and announced on Redis in
cluster mode. Written alone, a leaked key went on working for `key_cache_seconds` (an operator's 300 s: 5 minutes)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from urllib.parse import quote

from service.cli.core import _service_request, fail
from service.cli.database import missing_database, print_table, with_database
from service.cli.terminal import printable
from service.errors import IndexUnavailable, InvalidRequest, NotFound
from service.policy import keys as auth
from service.resources import Resources
from service.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = subparsers.add_parser("keys", help="manage API keys")
    sub = keys.add_subparsers(dest="keys_command", required=True)

    create = sub.add_parser("create", help="create a key (the secret is printed once)")
    create.add_argument("--caller", required=True, help="the caller id the key acts as")
    create.add_argument(
        "--role",
        action="append",
        default=[],
        dest="roles",
        help="a role of the permissions file (repeatable), e.g. admin, approver",
    )
    create.add_argument("--json", action="store_true", help="print the key as JSON")
    create.set_defaults(func=cmd_create)

    listing = sub.add_parser("list", help="list keys (never their secrets)")
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=cmd_list)

    revoke = sub.add_parser("revoke", help="revoke a key by id or shown prefix")
    revoke.add_argument("key", help="the key's id, or the prefix `keys list` shows")
    revoke.set_defaults(func=cmd_revoke)


def _unknown_roles(settings: Settings, roles: tuple[str, ...] | list[str]) -> str | None:
    """A note when the permissions file names none of a new key's roles: `--role develper` made a key whose caller
    may use the default role's tools only, without a word."""
    from service.policy.permissions import ADMIN_ROLE, PermissionsFileError, load_permissions

    path = settings.policy.permissions_file
    try:
        permissions = load_permissions(path)
    except PermissionsFileError:
        return None  # `toolscout serve` says what is wrong with the file
    known = {*permissions.roles, *permissions.approver_roles, ADMIN_ROLE, "metrics"}
    unknown = [role for role in roles if role not in known]
    if path is None or not unknown:
        return None
    return (
        f"note: the permissions file {path} has no role {', '.join(map(repr, unknown))} (its roles: "
        f"{', '.join(sorted(permissions.roles)) or 'none'}): the key may use what `default` allows, no more"
    )


def cmd_create(args: argparse.Namespace) -> int:
    async def run(resources: Resources) -> tuple[auth.CreatedKey, list[str]]:
        async with resources.session() as session:
            before = await auth.list_keys(session)
            created = await auth.create_key(session, args.caller, args.roles)
            await session.commit()
            return created, [str(role) for key in before for role in key.roles]

    settings = Settings()
    new_database = missing_database(settings)
    try:
        created, roles_before = asyncio.run(with_database(settings, run, create=True))
    except InvalidRequest as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    if (note := _unknown_roles(settings, created.roles)) is not None:
        print(note, file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    "id": created.id,
                    "key": created.key,
                    "prefix": created.prefix,
                    "caller": created.caller,
                    "roles": list(created.roles),
                }
            )
        )
    else:
        print(f"key for {created.caller} (roles: {', '.join(created.roles) or 'none'}), id {created.id}:")
        print(created.key)
        print(f"Store it now: only its hash is kept.{_what_changes(roles_before, created.roles)}", file=sys.stderr)
    if new_database is not None:  # the first key of a new folder, or a key a service elsewhere never sees
        print(
            f"note: created a new database at {new_database} for this key; a `toolscout serve` of another folder "
            "does not see it (TOOLSCOUT_DATA_DIR)",
            file=sys.stderr,
        )
    return 0


def _what_changes(roles_before: list[str], roles: tuple[str, ...] | list[str]) -> str:
    """What the new key changes for everyone: said of every key, and never that a first key without the admin role
    left the service without an admin (no `/keys`, server management or console Keys page but by the CLI)."""
    from service.policy.permissions import ADMIN_ROLE

    said = "" if roles_before else " Every request without a key is refused from now on."
    if ADMIN_ROLE not in (*roles_before, *roles):
        said += (
            " No key has the admin role: managing keys and servers over the API and the console's Keys page need "
            "one (`toolscout keys create --caller NAME --role admin`)."
        )
    return said


def cmd_list(args: argparse.Namespace) -> int:
    async def run(resources: Resources) -> list[dict[str, object]]:
        async with resources.session() as session:
            return [auth.key_view(row) for row in await auth.list_keys(session, include_revoked=True)]

    every = asyncio.run(with_database(Settings(), run))
    rows = every if args.all else [r for r in every if r["revoked_at"] is None]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not every:
        print("no API keys: the service runs open for one local user")
    elif not rows:
        print("no active API keys: every request is refused until a key is created")
    else:
        print_table(
            [{**r, "roles": ",".join(r["roles"])} for r in rows],  # type: ignore[arg-type]
            ["id", "prefix", "caller", "roles", "created_at", "revoked_at"],
        )
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        response = _service_request(settings, "DELETE", f"/keys/{quote(args.key, safe='')}")
    except IndexUnavailable as exc:  # this folder's service listens at another address than the CLI's
        response, why = None, exc.detail
    else:
        why = f"no service answered at {settings.frontend.api_url} (TOOLSCOUT_FRONTEND__API_URL)"
    if response is not None and response.status_code == 200:
        view = response.json()
        print(f"{_revoked(view)}; the running service refuses it now, and so do its replicas")
        return 0
    if response is not None and response.status_code not in (401, 403):
        return fail(response.json())  # e.g. no such key: the service's database is the record
    if response is not None:
        why = (
            f"the service at {settings.frontend.api_url} refused the revocation ({response.json().get('detail')}): "
            "with an admin key in TOOLSCOUT_FRONTEND__API_KEY it ends the key at once"
        )
    try:
        view, told = asyncio.run(with_database(settings, lambda resources: _revoked_in_database(resources, args.key)))
    except NotFound as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    if told:
        print(f"{_revoked(view)} in the database; the replicas were told over Redis and refuse it now")
        return 0
    seconds = settings.policy.key_cache_seconds
    print(
        f"{_revoked(view)} in the database; a running service refuses it within policy.key_cache_seconds "
        f"({seconds:g} s)"
    )
    print(f"note: {printable(why)}", file=sys.stderr)
    return 0


def _revoked(view: dict[str, object]) -> str:
    return f"revoked {view['id']} ({view['prefix']}, caller {printable(view['caller'])})"


async def _revoked_in_database(resources: Resources, key: str) -> tuple[dict[str, object], bool]:
    """Revoke the key in the database and, in cluster mode, announce it as `DELETE /keys` does: whether the
    replicas were told (False without Redis, or with Redis down)."""
    from service.cluster.state import KEYS_EVENT, cluster_state

    async with resources.session() as session:
        row = await auth.revoke_key(session, key)
        await session.commit()
        view = auth.key_view(row)
    bus = cluster_state(resources).bus
    if bus is None:
        return view, False
    try:
        return view, await bus.publish(KEYS_EVENT)
    finally:
        await bus.close()
