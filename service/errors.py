"""One exception tree for Toolscout and one RFC 9457 problem+json renderer.

    ToolscoutError (500, internal)
    ├── BadRequest (400, bad-request)
    │   ├── InvalidRequest (422, invalid-request)       a request body or query that fails its model
    │   └── InvalidArguments (422, invalid-arguments)   arguments that fail a tool's input schema
    ├── InvalidTool (422, invalid-tool)                  a registration that fails validation
    ├── Unauthorized (401, unauthorized)
    ├── PermissionDenied (403, permission-denied)
    │   ├── ApprovalRequired (403, approval-required)
    │   └── CrossSiteRequest (403, cross-site-request)  a console session cookie on a request not from the console
    ├── NotFound (404, not-found)
    │   └── HiddenTool (404, not-found)                  a tool the caller may not use: the same answer
    ├── Conflict (409, conflict)
    ├── PayloadTooLarge (413, payload-too-large)         a body or registration over a configured limit
    ├── UnsupportedMediaType (415, unsupported-media-type)  a body not sent as application/json
    ├── RateLimited (429, rate-limited)
    ├── UpstreamError (502, upstream-error)              crash or protocol error of an upstream server
    ├── Unavailable (503, unavailable)                   answered with Retry-After
    │   ├── IndexUnavailable (503, index-unavailable)
    │   └── DatabaseUnavailable (503, database-unavailable)
    └── UpstreamTimeout (504, upstream-timeout)

Anything else that escapes a route is caught by `CatchAllMiddleware`: a 500 problem+json carrying an error id
that is also in the log with the stack trace (the body never shows one). Index and database errors that were
not translated where they entered become a 503 there too.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from indexer.json_pointer import pointer_token
from service.observability.tracing import current_ids
from service.security.route_errors import api_paths, extra_field_reason, http_detail, json_position, unreadable_body

logger = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "https://toolscout.dev/problems/"
RETRY_AFTER_SECONDS = 5
MAX_INSTANCE_CHARS = 512  # of the request path a problem echoes as its `instance`
# A request's validation errors a 422 lists (then `more_errors`), each pointer cut to MAX_INSTANCE_CHARS: a 1.2 MB
# body of 100,000 keys no route takes was answered with all 100,000 errors, twice (11.5 MB, 1.9 s).
MAX_REPORTED_ERRORS = 20


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """`1 tool`, `2 tools`, `0 tools`: a count a person reads, and its noun (`plural` when not the noun plus s)."""
    shown = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{shown} {noun if shown == '1' else plural or noun + 's'}"  # a rate of 0.9999999 reads as 1


def verb(count: float, one: str, many: str) -> str:
    """The verb that agrees with a count: `1 query has`, `2 queries have`."""
    return one if count == 1 else many


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
    logged_detail: str | None = None  # the detail the execution log keeps when it keeps no argument values


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


class CrossSiteRequest(PermissionDenied):
    status, slug, title = 403, "cross-site-request", "Cross-site request refused"


class NotFound(ToolscoutError):
    status, slug, title = 404, "not-found", "Not found"


class HiddenTool(NotFound):
    """A tool the caller may not use, answered exactly like a missing one (the execution log says denied)."""


class Conflict(ToolscoutError):
    status, slug, title = 409, "conflict", "Conflict"


class PayloadTooLarge(ToolscoutError):
    status, slug, title = 413, "payload-too-large", "Request over a configured limit"


class UnsupportedMediaType(ToolscoutError):
    status, slug, title = 415, "unsupported-media-type", "The body must be sent as application/json"


class RateLimited(ToolscoutError):
    status, slug, title = 429, "rate-limited", "Rate limit exceeded"

    def __init__(self, detail: str, retry_after: float, **extensions: Any) -> None:
        super().__init__(detail, retry_after=round(retry_after, 3), **extensions)
        self.retry_after = retry_after


class UpstreamError(ToolscoutError):
    status, slug, title = 502, "upstream-error", "Upstream MCP server failed"
    caller_detail: str | None = None  # the detail for callers who may not read the server's health (non-admins)


class Unavailable(ToolscoutError):
    status, slug, title = 503, "unavailable", "Service unavailable"

    def __init__(self, detail: str, retry_after: float = RETRY_AFTER_SECONDS, **extensions: Any) -> None:
        super().__init__(detail, **extensions)
        self.retry_after = retry_after


class IndexUnavailable(Unavailable):
    status, slug, title = 503, "index-unavailable", "Vector index unavailable"


class DatabaseUnavailable(Unavailable):
    status, slug, title = 503, "database-unavailable", "Database unavailable"


class UpstreamTimeout(ToolscoutError):
    status, slug, title = 504, "upstream-timeout", "Upstream MCP call timed out"


class Problem(BaseModel):
    """An RFC 9457 problem: the body of every error answer (extensions such as `errors` or `limit` beside)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None


_DOCUMENTED = {
    400: "Bad request",
    401: "Missing or invalid API key",
    403: "Not allowed (permission, approval required, or a foreign Origin)",
    404: "Not found (or not visible to this caller)",
    409: "Conflict",
    413: "Over a configured limit",
    415: "A body not sent as application/json",
    421: "Host not served here (DNS rebinding protection)",
    422: "Invalid request, arguments or tool",
    429: "Rate limited (Retry-After)",
    502: "The upstream MCP server failed",
    503: "Index or database unavailable (Retry-After)",
    504: "The upstream MCP call timed out",
}


def problem_responses() -> dict[int | str, dict[str, Any]]:
    """The error answers of every route, for the OpenAPI document."""
    content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    return {status: {"model": Problem, "description": text, "content": content} for status, text in _DOCUMENTED.items()}


def json_pointer(parts: Iterable[Any]) -> str:
    """An RFC 6901 JSON pointer to the value at these keys and indices ("" is the whole document)."""
    return "".join("/" + pointer_token(p) for p in parts)


def body_pointer(*parts: Any) -> str:
    """The pointer of a request's problem, as every 422 gives it: `/body/...` into the JSON body (`/query/<name>`
    for a query parameter), the location first as FastAPI's validation errors name it."""
    return json_pointer(("body", *parts))


def echoed_path(path: str) -> str:
    """The request path as a problem's `instance` (or a pointer into the request): at most MAX_INSTANCE_CHARS of
    it (a path of 60 KB is not echoed back in full)."""
    return path if len(path) <= MAX_INSTANCE_CHARS else path[:MAX_INSTANCE_CHARS] + "..."


def problem_response(error: ToolscoutError, request: Request | None = None) -> JSONResponse:
    """Render an error as application/problem+json."""
    headers = {}
    if isinstance(error, RateLimited | Unavailable):
        headers["Retry-After"] = str(max(1, int(error.retry_after + 0.999)))
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    instance = echoed_path(str(request.url.path)) if request is not None else None
    if instance is not None and (ids := current_ids()) is not None:
        instance = f"{instance}#trace={ids[0]}"  # the trace of this occurrence, for the operator's trace viewer
        error.extensions.setdefault("trace_id", ids[0])
    return JSONResponse(error.problem(instance), status_code=error.status, media_type=PROBLEM_JSON, headers=headers)


NOT_JSON = "the body must be JSON, sent with Content-Type: application/json"


def _not_json(err: Any) -> bool:
    """A body FastAPI left as bytes: sent with another Content-Type than JSON's (or none)."""
    return tuple(err.get("loc", ())) == ("body",) and isinstance(err.get("input"), bytes | bytearray)


def _validation_errors(exc: RequestValidationError, route: object = None, sent_as: str = "") -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors()[:MAX_REPORTED_ERRORS]:
        if err.get("type") == "json_invalid":
            # FastAPI puts the character offset in the location: it is no field, so the pointer is the body.
            where = json_position(exc.body, err["loc"][1] if len(err.get("loc", ())) > 1 else None)
            reason = f"not valid JSON: {(err.get('ctx') or {}).get('error', 'malformed')}{where}"
            errors.append({"pointer": "/body", "reason": reason})
        elif _not_json(err):
            errors.append({"pointer": "/body", "reason": f"{NOT_JSON}, {sent_as}"})
        else:
            pointer = echoed_path(json_pointer(err.get("loc", ())))
            reason = err.get("msg", "invalid").removeprefix("Value error, ")  # pydantic's class of a check's own words
            if err.get("type") == "extra_forbidden":
                reason = extra_field_reason(route, tuple(err.get("loc", ())), reason)
            errors.append({"pointer": pointer, "reason": reason})
    return errors


def install_error_handlers(app: FastAPI) -> None:
    """Make every error of the app, including request validation and 404 routes, problem+json."""

    async def on_toolscout_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ToolscoutError)
        return problem_response(exc, request)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        sent = request.headers.get("content-type")
        sent_as = f"not {sent[:100]}" if sent else "and it came with none"
        errors = _validation_errors(exc, request.scope.get("route"), sent_as)
        more = len(exc.errors()) > MAX_REPORTED_ERRORS
        detail = "; ".join(f"{e['pointer']}: {e['reason']}" for e in errors) or "invalid request"
        detail += f" (the first {len(errors)} errors; there are more)" if more else ""
        extra = {"more_errors": True} if more else {}
        if any(_not_json(err) for err in exc.errors()):  # RFC 9110: a body of a type the route does not take is a 415
            error: ToolscoutError = UnsupportedMediaType(
                f"Unsupported media type: {detail}", errors=errors, expected="application/json", **extra
            )
        else:
            error = InvalidRequest(f"Invalid request: {detail}", errors=errors, **extra)
        return problem_response(error, request)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
            # FastAPI's "There was an error parsing the body" for what is not a JSONDecodeError: a body that is
            # not UTF-8, nests deeper than the parser goes, or holds a value it refuses (an integer of over 4,300
            # digits, NaN on a strict route). Said like any other invalid JSON.
            reason = unreadable_body(exc.__cause__)
            error = InvalidRequest(f"Invalid request: /body: {reason}", errors=[{"pointer": "/body", "reason": reason}])
            return problem_response(error, request)
        error = ToolscoutError(http_detail(request.method, echoed_path(request.url.path), exc, api_paths(request.app)))
        error.status = exc.status_code
        error.slug = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}.get(
            exc.status_code, "http-error"
        )
        error.title = {404: "Not found", 405: "Method not allowed", 413: "Request over a configured limit"}.get(
            exc.status_code, "HTTP error"
        )
        response = problem_response(error, request)
        if exc.status_code == 405 and exc.headers and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]  # RFC 9110: a 405 says which methods the route takes
        return response

    app.add_exception_handler(ToolscoutError, on_toolscout_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_middleware(CatchAllMiddleware)


_INDEX_MODULES = ("qdrant_client", "qdrant_edge", "indexer.index")
_DATABASE_MODULES = ("sqlalchemy", "psycopg", "sqlite3", "asyncpg", "aiosqlite")
# Connection-level failures only: a ProgrammingError or IntegrityError is a bug, and stays a 500.
_DATABASE_DOWN = {"OperationalError", "InterfaceError", "DisconnectionError", "TimeoutError"}


def translate_unexpected(exc: BaseException) -> ToolscoutError | None:
    """An index or database error that was not translated where it entered, as the 503 it means."""
    for kind in type(exc).__mro__:
        module = kind.__module__ or ""
        if module.startswith(_INDEX_MODULES):
            return IndexUnavailable(f"The vector index failed: {type(exc).__name__}")
        if module.startswith(_DATABASE_MODULES) and kind.__name__ in _DATABASE_DOWN:
            return DatabaseUnavailable(f"The database failed: {type(exc).__name__}")
    return None


def unexpected_error(exc: Exception, where: str) -> ToolscoutError:
    """An exception no handler knows, logged with a new error id and turned into the problem to answer."""
    error_id = uuid.uuid4().hex
    error = translate_unexpected(exc)
    if error is None:
        logger.error("unexpected error %s in %s", error_id, where, exc_info=exc)
        error = ToolscoutError(f"An unexpected error occurred; quote error id {error_id} to the operator")
    else:
        logger.warning("error %s in %s: %s", error_id, where, error.detail, exc_info=exc)
    error.extensions["error_id"] = error_id
    return error


def _problem_bytes(error: ToolscoutError, path: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = json.dumps(error.problem(path)).encode()
    headers = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode())]
    if isinstance(error, Unavailable):
        headers.append((b"retry-after", str(max(1, int(error.retry_after + 0.999))).encode()))
    return body, headers


class CatchAllMiddleware:
    """Whatever escapes the routes and their handlers becomes a problem+json, never a text/plain 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the last boundary: every error leaves as problem+json
            path = scope.get("path", "")
            error = unexpected_error(exc, f"{scope.get('method')} {path}")
            if started:
                return  # the response is on its way; the log has the error
            body, headers = _problem_bytes(error, path)
            await send({"type": "http.response.start", "status": error.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
