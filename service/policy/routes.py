"""Approvals of destructive calls: grant (POST /approvals), deny, read and list."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, model_validator

from service.deps import ApproverDep, CallerDep, ResourcesDep, SessionDep
from service.policy import approvals
from service.policy.service import is_approver, visible_names
from service.security.json_body import StrictJsonBodyRoute
from service.security.request_body import RequestBody, Text

router = APIRouter(prefix="/approvals", tags=["approvals"], route_class=StrictJsonBodyRoute)


class GrantRequest(RequestBody):
    """Grant a pending request by id, or approve a call in advance (caller + tool + arguments)."""

    approval_id: Text | None = Field(default=None, description="The id from the 403 approval_required answer")
    caller: Text | None = Field(default=None, description="In advance: the caller who may make the call")
    tool: Text | None = Field(default=None, description="In advance: the qualified tool name")
    arguments: dict[str, Any] | None = Field(default=None, description="In advance: the exact arguments")
    ttl_seconds: int | None = Field(
        default=None, ge=1, strict=True, description="Shorter validity than the configured one"
    )

    @model_validator(mode="after")
    def _one_form(self) -> GrantRequest:
        in_advance = self.caller is not None or self.tool is not None
        if (self.approval_id is None) == (not in_advance):
            raise ValueError("give either approval_id, or caller and tool (and arguments)")
        if in_advance and (self.caller is None or self.tool is None):
            raise ValueError("approving in advance needs both caller and tool")
        return self


class ApprovalResponse(BaseModel):
    id: str
    caller: str
    tool: str
    arguments_digest: str
    arguments: dict[str, Any] | None
    status: Literal["pending", "granted", "used", "denied", "expired"]
    requested_at: str | None
    granted_by: str | None
    granted_at: str | None
    expires_at: str | None
    used_at: str | None


class ApprovalListResponse(BaseModel):
    approvals: list[ApprovalResponse]


@router.post("", response_model=ApprovalResponse)
async def grant(
    request: GrantRequest, session: SessionDep, resources: ResourcesDep, caller: ApproverDep
) -> dict[str, Any]:
    """Grant a pending approval (or approve a call in advance); the call then works once before expiry."""
    if request.approval_id is not None:
        row = await approvals.grant_approval(resources, session, caller, request.approval_id, request.ttl_seconds)
    else:
        assert request.caller is not None and request.tool is not None
        row = await approvals.grant_call(
            resources,
            session,
            caller,
            request.caller,
            request.tool,
            request.arguments or {},
            request.ttl_seconds,
        )
    return approvals.approval_view(row)


@router.post("/{approval_id}/deny", response_model=ApprovalResponse)
async def deny(approval_id: str, session: SessionDep, resources: ResourcesDep, caller: ApproverDep) -> dict[str, Any]:
    """Refuse a pending approval, or withdraw a grant that was not used yet."""
    return approvals.approval_view(await approvals.deny_approval(resources, session, caller, approval_id))


@router.get("", response_model=ApprovalListResponse)
async def list_approvals(
    session: SessionDep,
    resources: ResourcesDep,
    caller: CallerDep,
    status: Literal["pending", "granted", "used", "denied"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Approvals, newest first: every caller's for an approver, one's own of the tools it may use otherwise."""
    visible = visible_names(resources, caller)
    rows = await approvals.list_approvals(session, caller, is_approver(resources, caller), status, limit, visible)
    return {"approvals": [approvals.approval_view(r) for r in rows]}


@router.get("/{approval_id}", response_model=ApprovalResponse)
async def get(approval_id: str, session: SessionDep, resources: ResourcesDep, caller: CallerDep) -> dict[str, Any]:
    """One approval: its requester and approvers may read it."""
    visible = visible_names(resources, caller)
    row = await approvals.get_approval(session, caller, approval_id, is_approver(resources, caller), visible)
    return approvals.approval_view(row)
