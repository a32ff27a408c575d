"""One exception tree for Toolscout and one RFC 9457 problem+json renderer.

    ToolscoutError (500, internal)
    ├── BadRequest (400, bad-request)
    │   ├── InvalidRequest (422, invalid-request)       a request body or query that fails its model
    │   └── InvalidArguments (422, invalid-arguments)   arguments that fail a tool's input schema
    ├── InvalidTool (422, invalid-tool)                  a registration that fails validation
    ├── Unauthorized (401, unauthorized)
    ├── PermissionDenied (403, permission-denied)
    │   └── ApprovalRequired (403, approval-required)
    ├── NotFound (404, not-found)
    ├── Conflict (409, conflict)
    ├── RateLimited (429, rate-limited)
    ├── UpstreamError (502, upstream-error)              crash or protocol error of an upstream server
    ├── IndexUnavailable (503, index-unavailable)
    └── UpstreamTimeout (504, upstream-timeout)
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.observability.tracing import current_ids

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "https://toolscout.dev/problems/"


class ToolscoutError(Exception):
    """Base of every error Toolscout reports; knows its HTTP status and problem type slug."""

    status = 500
    slug = "internal"
    title = "Internal error"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions

    def problem(self, instance: str | None = None) -> dict[str, Any]:
        """The RFC 9457 body of this error."""
        body: dict[str, Any] = {
            "type": TYPE_BASE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if instance:
            body["instance"] = instance
        body.update(self.extensions)
        return body


class BadRequest(ToolscoutError):
    status, slug, title = 400, "bad-request", "Bad request"


class InvalidArguments(BadRequest):
    status, slug, title = 422, "invalid-arguments", "Arguments do not match the tool's input schema"


class InvalidRequest(BadRequest):
    status, slug, title = 422, "invalid-request", "The request body or parameters are invalid"


class InvalidTool(ToolscoutError):
    status, slug, title = 422, "invalid-tool", "Invalid tool definition"


class Unauthorized(ToolscoutError):
    status, slug, title = 401, "unauthorized", "Missing or invalid API key"


class PermissionDenied(ToolscoutError):
    status, slug, title = 403, "permission-denied", "Not allowed"


class ApprovalRequired(PermissionDenied):
    status, slug, title = 403, "approval-required", "This call needs an approval"


class NotFound(ToolscoutError):
    status, slug, title = 404, "not-found", "Not found"


class Conflict(ToolscoutError):
    status, slug, title = 409, "conflict", "Conflict"


class RateLimited(ToolscoutError):
    status, slug, title = 429, "rate-limited", "Rate limit exceeded"

    def __init__(self, detail: str, retry_after: float, **extensions: Any) -> None:
        super().__init__(detail, retry_after=round(retry_after, 3), **extensions)
        self.retry_after = retry_after


class UpstreamError(ToolscoutError):
    status, slug, title = 502, "upstream-error", "Upstream MCP server failed"


class IndexUnavailable(ToolscoutError):
    status, slug, title = 503, "index-unavailable", "Vector index unavailable"


class UpstreamTimeout(ToolscoutError):
    status, slug, title = 504, "upstream-timeout", "Upstream MCP call timed out"


def problem_response(error: ToolscoutError, request: Request | None = None) -> JSONResponse:
    """Render an error as application/problem+json."""
    headers = {}
    if isinstance(error, RateLimited):
        headers["Retry-After"] = str(max(1, int(error.retry_after + 0.999)))
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    instance = str(request.url.path) if request is not None else None
    if instance is not None and (ids := current_ids()) is not None:
        instance = f"{instance}#trace={ids[0]}"  # the trace of this occurrence, for the operator's trace viewer
        error.extensions.setdefault("trace_id", ids[0])
    return JSONResponse(
        error.problem(instance), status_code=error.status, media_type=PROBLEM_JSON, headers=headers
    )


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ())]
        errors.append({"pointer": "/" + "/".join(loc), "reason": err.get("msg", "invalid")})
    return errors


def install_error_handlers(app: FastAPI) -> None:
    """Make every error of the app, including request validation and 404 routes, problem+json."""

    async def on_toolscout_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ToolscoutError)
        return problem_response(exc, request)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = _validation_errors(exc)
        detail = "; ".join(f"{e['pointer']}: {e['reason']}" for e in errors) or "invalid request"
        return problem_response(InvalidRequest(f"Invalid request: {detail}", errors=errors), request)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        error = ToolscoutError(str(exc.detail))
        error.status = exc.status_code
        error.slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        error.title = "Not found" if exc.status_code == 404 else "HTTP error"
        return problem_response(error, request)

    app.add_exception_handler(ToolscoutError, on_toolscout_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
