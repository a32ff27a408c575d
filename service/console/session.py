"""The console's sign-in and its API path: `POST /console/api/session` exchanges the pasted key for a session
cookie, `DELETE /console/api/session` signs out, and `/console/api/<route>` reaches the REST routes the pages use.

The session cookie is scoped to `/console/api` (service/policy/console_sessions.py), so the pages call the REST API
there: `/console/api/keys` is `/keys`, `/console/api/approvals/{id}/deny` is `/approvals/{id}/deny`, and so on for
the prefixes below, with the same routes, guards and permissions. The middleware marks every request under
`/console/api` as the console's: only those may authenticate with the cookie; the REST API at the root never
does (scripts keep sending `Authorization: Bearer`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from service.deps import ResourcesDep
from service.policy.console_sessions import (
    COOKIE,
    COOKIE_PATH,
    SCOPE_MARK,
    close_session,
    cookie_secure,
    open_session,
)
from service.policy.keys import presented_key
from service.policy.service import is_approver
from service.security.json_body import StrictJsonBodyRoute

API = COOKIE_PATH
# The REST routes the console's pages call (their first path segment).
REST_PREFIXES = frozenset({"search", "execute", "tools", "servers", "approvals", "keys", "analytics"})

router = APIRouter(prefix=API, tags=["console"], route_class=StrictJsonBodyRoute)


class SignInRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(default=None, max_length=512, description="The API key (or send it as a Bearer header)")


class SessionResponse(BaseModel):
    caller: str
    roles: list[str]
    admin: bool
    approver: bool
    expires_at: str = Field(description="The session ends then at the latest (sooner when idle or signed out)")
    idle_seconds: float = Field(description="The session ends after this long without a request")


@router.post("/session", response_model=SessionResponse)
async def sign_in(
    request: Request, response: Response, resources: ResourcesDep, body: SignInRequest | None = None
) -> dict[str, Any]:
    """Exchange an API key for a console session: an HttpOnly, SameSite=Strict cookie; the key is not kept.
    Needs the console's `X-Toolscout-Console: 1` header, like every request made with the session."""
    opened = await open_session(resources, request, (body.key if body else None) or presented_key(request))
    response.set_cookie(
        COOKIE,
        opened.session_id,
        max_age=opened.max_age,
        path=COOKIE_PATH,
        secure=cookie_secure(resources, request),
        httponly=True,
        samesite="strict",
    )
    caller = opened.caller
    return {
        "caller": caller.id,
        "roles": sorted(caller.roles),
        "admin": caller.is_admin,
        "approver": is_approver(resources, caller),
        "expires_at": opened.expires_at.isoformat(),
        "idle_seconds": resources.settings.console.session_idle_seconds,
    }


@router.delete("/session", status_code=204)
async def sign_out(request: Request, resources: ResourcesDep) -> Response:
    """End the console session: deleted on the server, the cookie cleared."""
    await close_session(resources, request)
    response = Response(status_code=204)
    response.delete_cookie(
        COOKIE, path=COOKIE_PATH, secure=cookie_secure(resources, request), httponly=True, samesite="strict"
    )
    return response


class ConsoleApiMiddleware:
    """Marks the requests under /console/api as the console's and hands those for the REST routes the pages use
    to these routes (`/console/api/keys/x` -> `/keys/x`). It answers nothing itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            root = scope.get("root_path", "")
            path = scope["path"]
            route_path = path[len(root) :] if root and path.startswith(root) else path
            if route_path.startswith(API + "/"):
                scope = {**scope, SCOPE_MARK: True}
                rest = route_path[len(API) :]
                if rest.split("/", 2)[1] in REST_PREFIXES:
                    scope["path"] = root + rest if root and path.startswith(root) else rest
                    raw = scope.get("raw_path")
                    if isinstance(raw, bytes) and API.encode() in raw:
                        scope["raw_path"] = raw.replace(API.encode(), b"", 1)
        await self.app(scope, receive, send)
