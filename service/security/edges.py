"""The guards every request passes before a route: host and origin, CORS when configured, body size, NUL in the URL;
and nosniff and no-store on every answer (security/headers.py)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service.security.headers import ResponseHeadersMiddleware
from service.security.hosts import HostOriginMiddleware, default_allowed_hosts
from service.security.limits import BodySizeLimitMiddleware, NulInUrlMiddleware
from service.settings import Settings


def install_edge_guards(app: FastAPI, settings: Settings) -> None:
    """Add the middleware; the last added runs first, so the host check sees every request (nosniff only adds a
    header to the answers)."""
    policy = settings.policy
    app.add_middleware(
        BodySizeLimitMiddleware, max_bytes=policy.max_body_bytes, max_call_bytes=policy.max_call_body_bytes
    )
    app.add_middleware(NulInUrlMiddleware)
    if policy.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=policy.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type"],
        )
    app.add_middleware(
        HostOriginMiddleware,
        allowed_hosts=default_allowed_hosts(settings.host, policy.allowed_hosts),
        cors_origins=policy.cors_origins,
    )
    app.add_middleware(ResponseHeadersMiddleware)  # outermost: on the guards' own refusals too
