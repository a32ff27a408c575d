"""Which HTTP upstream URLs a server added over the API may use: no private, loopback or link-local address.

The host is resolved and every address it resolves to is checked, so a public name pointing at 127.0.0.1 or
169.254.169.254 is refused as well. `execution.upstream_allowed_hosts` lists the exceptions: host names,
addresses, networks in CIDR notation, or "*". The same rule is applied again to every connection the HTTP client
opens (upstream/checked_http.py), so a name whose DNS answer changes after the check reaches no internal address
either."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

import anyio

from service.errors import InvalidRequest

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOW_HINT = "allow it with execution.upstream_allowed_hosts"


def is_internal(address: IpAddress) -> bool:
    """Private, loopback, link-local, unspecified, reserved or multicast: not a public upstream."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_reserved
        or address.is_multicast
    )


def _allowed(host: str, addresses: Sequence[IpAddress], allowed: Iterable[str]) -> bool:
    for entry in allowed:
        entry = entry.strip().lower()
        if entry == "*" or entry == host:
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if all(address in network for address in addresses):
            return True
    return False


def refusal(host: str, addresses: Sequence[IpAddress], allowed: Iterable[str]) -> str | None:
    """Why a host with these addresses may not be reached (None when it may): one internal address is enough."""
    if _allowed(host, addresses, allowed):
        return None
    internal = sorted({str(a) for a in addresses if is_internal(a)})
    if internal or not addresses:
        return f"host {host!r} resolves to an internal address ({', '.join(internal) or 'none'})"
    return None


def _refuse(url: str, reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"Upstream URL refused: {reason} ({ALLOW_HINT})",
        errors=[{"pointer": "/url", "reason": reason}],
        url=url,
    )


async def resolve(host: str, port: int) -> list[IpAddress]:
    """Every address a host name resolves to (an IP literal resolves to itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


async def check_upstream_url(url: str, allowed: Iterable[str]) -> None:
    """Raise InvalidRequest unless the URL's host resolves only to public addresses (or is allowed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refuse(url, "not an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise _refuse(url, "credentials in the URL; send them as headers")
    host = parts.hostname.lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise _refuse(url, "invalid port") from exc
    try:
        addresses = await resolve(host, port)
    except OSError as exc:
        raise _refuse(url, f"host {host!r} does not resolve") from exc
    if reason := refusal(host, addresses, allowed):
        raise _refuse(url, reason)
