"""GET /console (the single page), its static files, and two small routes the REST API lacked.

The page signs in by exchanging the pasted API key for a server-side session (session.py): the browser then
holds only an HttpOnly cookie scoped to /console/api, which no script in the page can read, and that counts only
on the console's own requests (its header, its origin). The Content-Security-Policy allows scripts, styles and
requests from this origin only (no inline code), and Trusted Types with no policy, so no string can ever become
HTML or script (the pages build the DOM from text nodes). Every response under /console carries these headers,
static files included: /console/static/index.html is the same page."""

from __future__ import annotations

from importlib import resources as package_files
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.responses import Response
from starlette.types import Scope

from service.console.queries import search_funnel
from service.console.session import ConsoleApiMiddleware
from service.console.session import router as session_router
from service.deps import CallerDep, ResourcesDep, SessionDep
from service.policy.service import is_approver
from service.usage.routes import ScopeDep

STATIC = package_files.files("service.console") / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'none'; frame-ancestors 'none'; base-uri 'none'; "
        "require-trusted-types-for 'script'; trusted-types 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(prefix="/console", tags=["console"])


class ConsoleFiles(StaticFiles):
    """The console's static files, with the page's security headers (a file served without them, such as
    index.html, would be the console framed by any site and without its policy)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


class MeResponse(BaseModel):
    caller: str
    roles: list[str]
    admin: bool
    approver: bool
    open: bool


class FunnelResponse(BaseModel):
    searches: int
    followed_by_call: int
    followed_by_success: int
    without_result: int
    calls: int
    calls_from_search: int


@router.get("", response_class=HTMLResponse, include_in_schema=False)
async def console_page() -> HTMLResponse:
    """The console's single page (it needs no key: every datum comes from the API with the user's session)."""
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"), headers=SECURITY_HEADERS)


@router.get("/api/me", response_model=MeResponse)
async def me(resources: ResourcesDep, caller: CallerDep) -> dict[str, Any]:
    """Who the presented key (or console session) is: the console shows the pages these roles may use."""
    return {
        "caller": caller.id,
        "roles": sorted(caller.roles),
        "admin": caller.is_admin,
        "approver": is_approver(resources, caller),
        "open": caller.is_open,
    }


@router.get("/api/funnel", response_model=FunnelResponse)
async def funnel(session: SessionDep, scope: ScopeDep) -> dict[str, Any]:
    """Searches, those followed by a call, those followed by a successful call (scoped like /analytics)."""
    return await search_funnel(session, scope)


def install_console(app: FastAPI) -> None:
    """The console's routes, its sign-in, its path to the REST routes and its static files (package data)."""
    app.include_router(router)
    app.include_router(session_router)
    app.add_middleware(ConsoleApiMiddleware)  # marks /console/api requests before any route sees them
    app.mount("/console/static", ConsoleFiles(directory=str(STATIC)), name="console-static")
