"""POST /run: a JavaScript program that calls many tools, inside budgets, through the /execute path."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from service.deps import CallerDep, CodeModeDep
from service.security.json_body import StrictJsonBodyRoute
from service.security.request_body import RequestBody, Text

router = APIRouter(tags=["code mode"], route_class=StrictJsonBodyRoute)


class RunRequest(RequestBody):
    """A script: the body of an async function; `return` gives the result."""

    script: str = Field(min_length=1, description="JavaScript, e.g. `return await tools.time__get_current_time({})`")
    approval_ids: list[Annotated[Text, Field(max_length=36)]] = Field(
        default_factory=list, max_length=100, description="Granted approvals for the script's destructive calls"
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        description="Wall-clock budget (at most the configured code_mode.timeout_seconds)",
    )


class RunCall(BaseModel):
    """One tool call or search of the script, in the order it was made."""

    index: int
    kind: str = Field(description="tool or search")
    name: str
    line: int | None = Field(description="The script line that made the call")
    status: str = Field(description="The execution-log status (ok, tool_error, denied ...), or cancelled")
    execution_id: str | None
    duration_ms: float
    error: dict[str, Any] | None
    warnings: list[dict[str, str]] = Field(
        default_factory=list, description="What screening found in the call's result, as /execute's warnings"
    )


class RunResponse(BaseModel):
    """The script's return value, console lines and calls; `error` when it did not finish."""

    run_id: str = Field(description="The run id every execution-log row of the script carries")
    result: Any
    logs: list[str]
    logs_dropped: int
    calls: list[RunCall]
    error: dict[str, Any] | None = Field(
        description="type (script_error, tool_error, approval_required, timeout, memory_limit, call_limit, "
        "engine_error), message, line, and the failing call"
    )
    memory_bytes: int
    notes: list[str] = Field(
        default_factory=list, description="What looks like a mistake in a run that ended well (no `return`)"
    )
    queued_ms: float
    duration_ms: float


@router.post("/run", response_model=RunResponse)
async def run_script(request: RunRequest, runner: CodeModeDep, caller: CallerDep) -> dict[str, Any]:
    """Run a script; its tools are `tools.<qualified_name>(arguments)`, plus `search_tools(query, k)`."""
    return await runner.run(caller, request.script, request.approval_ids, request.timeout_seconds)
