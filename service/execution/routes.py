"""POST /execute, POST /execute/batch and GET /results/{id}."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from service.deps import CallerDep, GatewayDep, ResourcesDep
from service.errors import InvalidRequest, RateLimited, body_pointer, counted
from service.execution.screening import flag_page
from service.policy.keys import key_resolver
from service.policy.service import BODY_TOKENS
from service.security.json_body import StrictJsonBodyRoute
from service.security.request_body import RequestBody, Text

router = APIRouter(tags=["execute"], route_class=StrictJsonBodyRoute)


class ExecuteRequest(RequestBody):
    """One call of a tool by its qualified name."""

    name: Text = Field(min_length=1, max_length=256, description="Qualified tool name, e.g. time__get_current_time")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments, checked against the input schema")
    search_id: Text | None = Field(default=None, max_length=36, description="The /search that led to this call")
    approval_id: Text | None = Field(default=None, max_length=36, description="A granted approval for this call")


class ExecuteResponse(BaseModel):
    """The MCP result of the call, cut to the token budget when it is longer (the rest behind result_id)."""

    execution_id: str
    name: str
    server: str
    status: str = Field(description="ok, or tool_error when the tool reported an error (is_error)")
    content: list[dict[str, Any]]
    structured_content: dict[str, Any] | None
    is_error: bool
    result_id: str | None = Field(description="Where the full result is kept when truncated")
    truncated: bool
    total_tokens: int = Field(description="Tokens (cl100k_base) of the full result")
    returned_tokens: int
    duration_ms: float
    warnings: list[dict[str, str]] = Field(
        default_factory=list,
        description="What screening found in the result (policy.screen_results): invisible characters left out, "
        "text addressed to the model; each {pointer, reason}",
    )


class BatchRequest(RequestBody):
    """Calls run in parallel; results come back in request order."""

    calls: list[ExecuteRequest] = Field(min_length=1)
    concurrency: int | None = Field(default=None, ge=1, le=64, strict=True, description="At most this many at once")


class BatchItem(BaseModel):
    """One call's outcome: its result, or its problem (RFC 9457) when it failed."""

    index: int
    ok: bool
    status: int
    result: ExecuteResponse | None
    error: dict[str, Any] | None


class BatchResponse(BaseModel):
    results: list[BatchItem]
    succeeded: int
    failed: int


class ResultPageResponse(BaseModel):
    """A page of a stored result; offsets and limits count tokens (cl100k_base)."""

    result_id: str
    tool: str
    offset: int
    limit: int
    total_tokens: int
    returned_tokens: int
    text: str
    next_offset: int | None
    warnings: list[dict[str, str]] = Field(
        default_factory=list, description="Text of the page addressed to the model (policy.screen_results)"
    )


@router.post("/execute", response_model=ExecuteResponse)
async def execute(request: ExecuteRequest, caller: CallerDep, gateway: GatewayDep) -> dict[str, Any]:
    """Call a tool on the server that owns it.

    404 names the closest tools, 422 lists each invalid argument by JSON pointer, 504 when the call outlives
    the timeout (it is cancelled upstream), 502 when the server fails (it is restarted)."""
    result = await gateway.executor.execute(
        caller, request.name, request.arguments, search_id=request.search_id, approval_id=request.approval_id
    )
    return result.as_dict()


@router.post("/execute/batch", response_model=BatchResponse)
async def execute_batch(
    request: BatchRequest, http: Request, resources: ResourcesDep, caller: CallerDep, gateway: GatewayDep
) -> dict[str, Any]:
    """Run several calls in parallel (bounded); one failing call does not fail the others."""
    settings = resources.settings.execution
    if len(request.calls) > settings.batch_max_calls:
        most = f"at most {counted(settings.batch_max_calls, 'call')}"
        raise InvalidRequest(
            f"A batch holds {most}, not {len(request.calls)}",
            errors=[{"pointer": body_pointer("calls"), "reason": most}],
            limit="execution.batch_max_calls",
        )
    # The request took one token when its caller was resolved; each further call takes its own. A batch of more
    # calls than a bucket holds could never be paid for: told to retry, a client would retry for ever.
    limiter = key_resolver(resources).limiter
    if limiter.enabled and len(request.calls) > limiter.burst:
        burst = int(limiter.burst)
        most = f"at most {counted(burst, 'call')}"
        raise InvalidRequest(
            f"A batch of {len(request.calls)} calls costs {len(request.calls)} rate-limit tokens and a key's bucket "
            f"holds {burst}: send {most} at once",
            errors=[{"pointer": body_pointer("calls"), "reason": f"{most} (policy.rate_limit_burst)"}],
            limit="policy.rate_limit_burst",
        )
    # Its body's tokens and its calls' together at most the burst: 60 calls in a 1.9 MB body (30 tokens) cost 89 of
    # a bucket of 60, a batch no client could ever pay for.
    paid = int(http.scope.get(BODY_TOKENS, 1))
    more = max(0, min(len(request.calls) - 1, int(limiter.burst) - paid))
    if more and (wait := await limiter.acquire_async(caller.key_id or caller.id, more)):
        calls = len(request.calls)
        raise RateLimited(f"A batch of {counted(calls, 'call')} costs {counted(calls, 'token')}", retry_after=wait)
    concurrency = min(request.concurrency or settings.batch_concurrency, settings.batch_concurrency)
    items = await gateway.executor.execute_batch(caller, [call.model_dump() for call in request.calls], concurrency)
    succeeded = sum(1 for item in items if item["ok"])
    return {"results": items, "succeeded": succeeded, "failed": len(items) - succeeded}


@router.get("/results/{result_id}", response_model=ResultPageResponse)
async def get_result(
    result_id: str,
    resources: ResourcesDep,
    caller: CallerDep,
    gateway: GatewayDep,
    offset: int = Query(0, ge=0, description="First token"),
    limit: int | None = Query(None, ge=1, le=100_000, description="Tokens (default: the result token budget)"),
) -> dict[str, Any]:
    """Page through a result that /execute cut to the token budget."""
    limit = limit or resources.settings.execution.result_token_budget
    page = await gateway.results.page(caller, result_id, offset, limit)
    if resources.settings.policy.screen_results:
        page = replace(page, warnings=await flag_page(page.text))
    return page.as_dict()
