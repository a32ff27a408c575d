"""Whose X-Forwarded-For is believed: only that of the proxies in `policy.trusted_proxies`, none by default.

A client is the TCP peer of its connection unless that peer is a listed proxy. uvicorn alone believes any peer on
loopback (its FORWARDED_ALLOW_IPS, default 127.0.0.1 and ::1): any local process could then pose as any number of
addresses and slip past the bounds kept per client address (failed keys, the MCP front end's HTTP sessions)."""

from __future__ import annotations

import logging
import os
from typing import Any

from service.settings import Settings

logger = logging.getLogger(__name__)

UVICORN_VARIABLE = "FORWARDED_ALLOW_IPS"


def forwarding_options(settings: Settings) -> dict[str, Any]:
    """The `uvicorn.Config` options of a Toolscout server: forwarded headers from the trusted proxies only."""
    proxies = settings.policy.trusted_proxies
    if os.environ.get(UVICORN_VARIABLE):
        logger.warning(
            "%s is ignored: Toolscout believes X-Forwarded-For only from TOOLSCOUT_POLICY__TRUSTED_PROXIES (now %s)",
            UVICORN_VARIABLE,
            proxies or "empty: every client is the address it connects from",
        )
    # uvicorn trusts every peer for "*" alone, and would read a "*" among addresses as a host literal.
    return {"proxy_headers": bool(proxies), "forwarded_allow_ips": "*" if "*" in proxies else list(proxies)}
