"""The open-mode rule: without API keys the service serves one local admin only when nobody else can reach it.

Open mode needs both `policy.open_without_keys` (default true) and a loopback bind address. Bound anywhere else
with no key in the database, the service refuses to start: the first key is created with the CLI
(`toolscout keys create`), never over HTTP. Served, the open admin answers only this machine's own requests
(`not_local`): none relayed by a proxy, none from a client that is not loopback, none sent to a Host that is not a
loopback name. A relay that adds no header and sends a loopback Host (an `ssh -L`, nginx without X-Forwarded-For)
cannot be told from the local user: nothing here can refuse it."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from service.security.hosts import split_host
from service.settings import Settings

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
# What a reverse proxy adds to the requests it relays (nginx's usual X-Real-IP and X-Forwarded-For, Caddy's and
# Traefik's X-Forwarded-*, RFC 7239's Forwarded). A proxy on this machine connects from loopback and, by default,
# sends the loopback Host it was told to reach: only these headers tell its requests from the local user's.
RELAY_HEADERS = frozenset({b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-real-ip", b"via"})


class StartupRefused(RuntimeError):
    """The service would be reachable by anyone as an admin: it does not start."""


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def relayed(headers: Iterable[tuple[bytes, bytes]], client: str | None) -> bool:
    """Whether a request reached a loopback-bound server from elsewhere: through a reverse proxy (its headers), or
    from a peer that is not loopback (a trusted proxy's forwarded address)."""
    if any(name.lower() in RELAY_HEADERS for name, _ in headers):
        return True
    try:
        address = ipaddress.ip_address(client) if client is not None else None
    except ValueError:  # no address (a Unix socket) or a test client's name: nothing says it came from elsewhere
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, as a dual-stack socket names an IPv4 peer
    return address is not None and not (address.is_loopback or (mapped is not None and mapped.is_loopback))


def names_loopback(host: str) -> bool:
    """Whether the host of a Host header (split_host: no port) names this machine's loopback: a localhost name
    (`*.localhost` too, RFC 6761) or a loopback address."""
    return is_loopback(host) or host.endswith(".localhost")


def not_local(headers: Iterable[tuple[bytes, bytes]], client: str | None) -> str | None:
    """Why a request to a loopback-bound server may come from another machine, or None when it is this machine's
    own: relayed (a proxy's headers, a client that is not loopback), or for a Host that is not a loopback name.
    A reverse proxy that passes its client's Host on (nginx's `proxy_set_header Host $host`) and adds no header
    connects from loopback like the local user: its Host (a public name, an address) is all that tells them apart."""
    headers = list(headers)
    if relayed(headers, client):
        return "this one came through a proxy"
    hosts = [split_host(value.decode("latin-1")) for name, value in headers if name.lower() == b"host"]
    host = hosts[0] if len(hosts) == 1 else ""
    if not names_loopback(host):
        return f"this one was sent to the host {host!r}, not to localhost, 127.0.0.1 or [::1] (a proxy relays so)"
    return None


def open_mode_allowed(settings: Settings) -> bool:
    """Whether a service without keys may serve its local admin."""
    return settings.policy.open_without_keys and is_loopback(settings.host)


def refuse_unsafe_start(settings: Settings, keys_exist: bool) -> None:
    """Raise StartupRefused when the service would run without keys on a non-loopback address."""
    if keys_exist or is_loopback(settings.host):
        return
    raise StartupRefused(
        f"Refusing to start: bound to {settings.host}, reachable from other machines, and no API key exists. "
        "Create the first admin key with `toolscout keys create --caller admin --role admin` "
        "(then send it as `Authorization: Bearer <key>`), or bind to 127.0.0.1."
    )
