"""Host and Origin checks on the REST API, so a web page cannot reach a local service through DNS rebinding.

A browser that resolves `evil.example` to 127.0.0.1 still sends `Host: evil.example`; a request whose Host is
not one of the allowed names gets 421 (Misdirected Request). IP-literal hosts are always allowed: DNS
rebinding needs a name, and a page served from an IP address is cross-origin anyway. A request with an
`Origin` header (a browser's cross-site request) must come from an allowed origin: a configured CORS origin
or one whose host is allowed. CORS itself is off unless origins are configured. An origin admitted only by a `*`
in the CORS origins is marked on the request (ANY_ORIGIN_MARK): open mode serves no such page (any site of the web
was the local admin and read the answers; policy/service.py)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import echoed_path

PROBLEM_JSON = b"application/problem+json"
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")
# Set on a request whose Origin only a `*` among the CORS origins admits: a page of any site.
ANY_ORIGIN_MARK = "toolscout.any_origin"


def default_allowed_hosts(bound_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The bound address, the localhost names and the configured extra names (lower case, no port)."""
    names = {name.lower() for name in LOCAL_NAMES}
    if bound_host not in WILDCARD_ADDRESSES:
        names.add(bound_host.strip("[]").lower())
    names.update(name.strip().lower() for name in extra if name.strip())
    return frozenset(names)


def split_host(value: str) -> str:
    """The host part of a Host header or netloc, lower case, without port or IPv6 brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """Whether a request's host (from its Host header) may reach the API."""
    if "*" in allowed or _is_ip(host) or host in allowed:
        return True
    # `*.localhost` resolves to loopback by RFC 6761, never through public DNS; `.example.com` entries allow
    # every subdomain.
    if host.endswith(".localhost"):
        return True
    return any(name.startswith(".") and (host.endswith(name) or host == name[1:]) for name in allowed)


def cross_site_subresource(headers: dict[bytes, bytes]) -> bool:
    """Whether a browser sent this for a page of another site without CORS (`<img src>`, `<script src>`): such
    a request carries no `Origin`, only `Sec-Fetch-Site: cross-site`. No API client sends that, and in open mode
    every one of them was the local admin: 16 images of /events took every event stream of the open user (its
    MCP front end's /events got 429), and a few hundred drained its rate limit. A navigation (a link followed to
    /console) still loads."""
    site = headers.get(b"sec-fetch-site", b"").lower()
    return site == b"cross-site" and headers.get(b"sec-fetch-mode", b"").lower() != b"navigate"


def problem_body(status: int, slug: str, title: str, detail: str, path: str | None = None) -> bytes:
    """A problem+json body for ASGI middleware (with `instance` when the request's path is given)."""
    body = {"type": f"https://toolscout.dev/problems/{slug}", "title": title, "status": status, "detail": detail}
    if path is not None:
        body["instance"] = echoed_path(path)
    return json.dumps(body).encode()


async def send_problem(send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Answer a request with a problem+json body straight from ASGI middleware."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", PROBLEM_JSON), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HostOriginMiddleware:
    """Refuse requests for a host that is not ours (421) and browser requests from foreign origins (403)."""

    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str], cors_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.cors_origins = frozenset(origin.rstrip("/").lower() for origin in cors_origins)

    def origin_allowed(self, origin: str) -> bool:
        """Whether a browser page of this origin may call the API."""
        return "*" in self.cors_origins or self.origin_named(origin)

    def origin_named(self, origin: str) -> bool:
        """Whether this origin is allowed without a `*`: listed, or of an allowed host."""
        origin = origin.rstrip("/").lower()
        if origin in self.cors_origins:
            return True
        if origin == "null":
            return False
        try:
            netloc = urlsplit(origin).netloc
        except ValueError:  # `http://[::1` or `http://[x]`: urlsplit refuses it, and no page has that origin
            return False
        host = split_host(netloc)
        # An IP-literal origin is only ours if it is the bound address or loopback.
        if _is_ip(host):
            return host in self.allowed_hosts or ipaddress.ip_address(host).is_loopback
        return bool(netloc) and host_allowed(host, self.allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        pairs = scope.get("headers", [])
        headers = {key.lower(): value for key, value in pairs}
        host = split_host(headers.get(b"host", b"").decode("latin-1"))
        path = scope.get("path", "")
        if sum(key.lower() == b"host" for key, _ in pairs) > 1:
            # RFC 9112 3.2: a 400. This check read the last and the routes (Starlette) read the first: with
            # `Host: evil.example` then `Host: localhost` the console compared an Origin with the first.
            detail = "A request carries one Host header; this one carries several"
            await send_problem(send, 400, problem_body(400, "bad-request", "Bad request", detail, path))
            return
        if not host_allowed(host, self.allowed_hosts):
            detail = (
                f"Host {host!r} is not served here (allowed: the bound address and localhost names; "
                "add names to policy.allowed_hosts)"
            )
            await send_problem(send, 421, problem_body(421, "misdirected-request", "Misdirected request", detail, path))
            return
        origin = headers.get(b"origin")
        if origin is None and cross_site_subresource(headers):
            detail = (
                "A page of another site loaded this without CORS (an image, a script, a style sheet): "
                "only the service's own pages, navigations and CORS requests of policy.cors_origins are served"
            )
            await send_problem(send, 403, problem_body(403, "forbidden-origin", "Origin not allowed", detail, path))
            return
        if origin is not None and not self.origin_allowed(origin.decode("latin-1")):
            detail = "Cross-origin requests are refused unless the origin is in policy.cors_origins"
            await send_problem(send, 403, problem_body(403, "forbidden-origin", "Origin not allowed", detail, path))
            return
        if origin is not None and not self.origin_named(origin.decode("latin-1")):
            scope = {**scope, ANY_ORIGIN_MARK: True}
        await self.app(scope, receive, send)
