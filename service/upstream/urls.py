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


# Not public destinations, whatever `ipaddress` of this Python version says (its `is_private` and `is_global`
# changed between versions): IANA's special-purpose registries, multicast and the cloud metadata address included.
_INTERNAL_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT (Alibaba Cloud's metadata address 100.100.100.200)
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local: 169.254.169.254 is most clouds' metadata service
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, 255.255.255.255 included
        "::/128",
        "::1/128",
        "::/96",  # IPv4-compatible (deprecated)
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard
        "2001::/23",  # IETF protocol assignments, Teredo
        "2001:db8::/32",
        "fc00::/7",  # unique local (AWS's fd00:ec2::254)
        "fe80::/10",
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def embedded_ipv4(address: IpAddress) -> IpAddress:
    """The IPv4 address an IPv6 form stands for (IPv4-mapped, well-known NAT64, 6to4), else the address itself:
    a connection to such a form reaches that IPv4 address."""
    if not isinstance(address, ipaddress.IPv6Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return address


def is_internal(address: IpAddress) -> bool:
    """Not a public destination: loopback, private, link-local, CGNAT, multicast, reserved or special-purpose,
    also when written as an IPv4-mapped, NAT64 or 6to4 IPv6 address. The one rule of the URL checks, the checked
    HTTP client and the egress proxy."""
    address = embedded_ipv4(address)
    return any(address in network for network in _INTERNAL_NETWORKS) or not address.is_global


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


def _refuse(url: str, reason: str, pointer: str) -> InvalidRequest:
    return InvalidRequest(
        f"Upstream URL refused: {reason} ({ALLOW_HINT})",
        errors=[{"pointer": pointer, "reason": reason}],
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


async def check_upstream_url(url: str, allowed: Iterable[str], *, pointer: str) -> None:
    """Raise InvalidRequest unless the URL's host resolves only to public addresses (or is allowed); `pointer`:
    where the URL is, for the problem's errors."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refuse(url, "not an http:// or https:// URL with a host", pointer)
    if parts.username or parts.password:
        raise _refuse(url, "credentials in the URL; send them as headers", pointer)
    host = parts.hostname.lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise _refuse(url, "invalid port", pointer) from exc
    try:
        addresses = await resolve(host, port)
    except OSError as exc:
        raise _refuse(url, f"host {host!r} does not resolve", pointer) from exc
    if reason := refusal(host, addresses, allowed):
        raise _refuse(url, reason, pointer)
