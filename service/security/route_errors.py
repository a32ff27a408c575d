"""What Starlette's bare "Not Found" and "Method Not Allowed" leave out: what was asked, and where to look.

A newcomer's `curl http://127.0.0.1:8765/search` (a GET) was told "Method Not Allowed", and `/docs`, off by default,
"Not Found", as a misspelt route is."""

from __future__ import annotations

from starlette.exceptions import HTTPException

DOCS_UI_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")


def http_detail(method: str, path: str, exc: HTTPException) -> str:
    """The problem's detail for a router's 404 or 405 (`path` as echoed); another HTTP error's own detail."""
    if exc.status_code == 404 and exc.detail == "Not Found":
        if path in DOCS_UI_PATHS:
            return (
                "Swagger UI (/docs) and ReDoc (/redoc) are off: TOOLSCOUT_DOCS_UI=true serves them (their scripts come "
                "from a CDN); the OpenAPI document is at /openapi.json"
            )
        return f"Nothing at {path}: the API's routes are in /openapi.json"
    if exc.status_code == 405 and exc.detail == "Method Not Allowed":
        allowed = (exc.headers or {}).get("Allow")
        return f"{method[:16]} is not a method of {path}" + (f": it takes {allowed}" if allowed else "")
    return str(exc.detail)
