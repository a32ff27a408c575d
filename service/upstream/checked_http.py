"""The HTTP client of servers added over the API: every connection goes to an address checked at that moment.

Checking the URL when a server is added is not enough, since the client would resolve the host again at each
connection and a name whose DNS answer changes afterwards (rebinding) would reach an internal address. Here
httpcore2 opens its connections through a network backend that resolves the host itself, checks every address
with the rule of upstream/urls.py and connects to a checked address as an IP literal: nothing resolves the name
in between.
TLS is unaffected: httpcore2 takes the certificate's expected name and the SNI from the URL's host, not from the
address it connected to, and the Host header stays the name too."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable, Sequence

import httpcore2
import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from service.upstream import urls

logger = logging.getLogger(__name__)

# httpx2's default pool limits (httpx2.AsyncClient uses them when it builds its own transport).
POOL_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)


class AddressRefused(httpcore2.ConnectError):
    """A connection not opened: the host resolves to an address the server may not reach. httpx2 raises it as an
    httpx2.ConnectError with this message."""


class CheckedAddressBackend(httpcore2.AsyncNetworkBackend):
    """Opens a TCP connection only to an address that passes the rule of urls.py when it is opened."""

    def __init__(self, allowed_hosts: Sequence[str], server_id: str) -> None:
        self._allowed_hosts = list(allowed_hosts)
        self._server_id = server_id
        self._inner = httpcore2.AnyIOBackend()

    async def checked_addresses(self, host: str, port: int) -> list[urls.IpAddress]:
        """The addresses of host a connection may go to now; AddressRefused (logged) when there are none."""
        try:
            addresses = await urls.resolve(host, port)
        except OSError as exc:
            raise httpcore2.ConnectError(f"host {host!r} does not resolve: {exc}") from exc
        if reason := urls.refusal(host, addresses, self._allowed_hosts):
            refused = AddressRefused(f"refused to connect to {host}:{port}: {reason} ({urls.ALLOW_HINT})")
            logger.warning("MCP server %s: %s", self._server_id, refused)
            raise refused
        return addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        failure = httpcore2.ConnectError(f"host {host!r} resolves to no address")
        for address in await self.checked_addresses(host, port):
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore2.ConnectError as exc:  # refused or unreachable: the next address may answer
                failure = exc
        raise failure


class CheckedAddressTransport(httpx2.AsyncHTTPTransport):
    """httpx2's HTTP transport on a CheckedAddressBackend."""

    def __init__(self, backend: CheckedAddressBackend, ssl_context: ssl.SSLContext | None = None) -> None:
        context = ssl_context or httpx2.create_ssl_context()
        super().__init__(verify=context, trust_env=False)
        # httpx2 2.16 takes no network backend, only httpcore2's pool does: the transport's pool is the one place
        # to put it. The tests that connect through this transport would notice a renamed attribute.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=context,
            max_connections=POOL_LIMITS.max_connections,
            max_keepalive_connections=POOL_LIMITS.max_keepalive_connections,
            keepalive_expiry=POOL_LIMITS.keepalive_expiry,
            network_backend=backend,
        )


def checked_http_client(
    headers: dict[str, str],
    allowed_hosts: Sequence[str],
    server_id: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx2.AsyncClient:
    """The client of `create_mcp_http_client` (its timeouts, no proxy: a proxy would resolve the name itself)
    whose connections go only to addresses allowed for a server added over the API."""
    backend = CheckedAddressBackend(allowed_hosts, server_id)
    return httpx2.AsyncClient(
        headers=headers or None,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=CheckedAddressTransport(backend, ssl_context),
    )


__all__ = ["AddressRefused", "CheckedAddressBackend", "CheckedAddressTransport", "checked_http_client"]
