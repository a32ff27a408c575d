"""Approvals of destructive calls: requested by /execute, granted by an approver, used once.

An approval is bound to the caller, the tool, the digest of the arguments and an expiry; nothing lives in a
session, so the flow works over stateless HTTP: execute -> 403 approval_required (with the request) ->
POST /approvals by an approver -> execute again with the approval id, which works once."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import false, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.among import among
from service.db.engine import APPROVAL_REQUEST_LOCKS, lock_key, take_turn
from service.db.models import Approval, as_utc, utcnow
from service.errors import (
    ApprovalRequired,
    BadRequest,
    Conflict,
    NotFound,
    PermissionDenied,
    RateLimited,
    counted,
    verb,
)
from service.policy.callers import Caller
from service.resources import Resources

PENDING, GRANTED, USED, DENIED, EXPIRED = "pending", "granted", "used", "denied", "expired"
REDACTED = "***"


def arguments_digest(arguments: dict[str, Any] | None) -> str:
    """SHA-256 of the canonical JSON of a call's arguments (sorted keys, no spaces)."""
    canonical = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


# What an approval lists of the argument names (the digest binds all of them and their values): 110,000 names a
# call, 20 pending calls of one caller, put 43 MB into the approvers' list.
LISTED_ARGUMENTS = 100
LISTED_NAME_CHARS = 96
MORE = "…"


def _listed_name(name: str) -> str:
    if len(name) <= LISTED_NAME_CHARS:
        return name
    return f"{name[:LISTED_NAME_CHARS]}{MORE}{hashlib.sha256(name.encode(errors='replace')).hexdigest()[:8]}"


def stored_arguments(resources: Resources, arguments: dict[str, Any] | None) -> dict[str, Any] | None:
    """What an approval keeps of the arguments: the values only when `execution.log_raw_arguments` is on.

    Otherwise the approver sees which arguments the call has (the first LISTED_ARGUMENTS names, a long one cut and
    told apart by a hash); the digest binds the approval to all of them and their values."""
    if arguments is None or resources.settings.execution.log_raw_arguments:
        return arguments
    names = sorted(arguments)
    listed: dict[str, Any] = {_listed_name(key): REDACTED for key in names[:LISTED_ARGUMENTS]}
    if len(names) > LISTED_ARGUMENTS:
        listed[MORE] = f"{len(names) - LISTED_ARGUMENTS} more arguments"
    return listed


def status_of(row: Approval, now: datetime | None = None) -> str:
    """The stored status, or `expired` once a pending or granted approval is past its expiry."""
    now = now or utcnow()
    if row.status in (PENDING, GRANTED) and as_utc(row.expires_at) <= now:
        return EXPIRED
    return row.status


def approval_view(row: Approval) -> dict[str, Any]:
    """The public shape of an approval."""

    def iso(moment: datetime | None) -> str | None:
        return as_utc(moment).isoformat() if moment else None

    return {
        "id": row.id,
        "caller": row.caller,
        "tool": row.tool,
        "arguments_digest": row.arguments_digest,
        "arguments": row.arguments,
        "status": status_of(row),
        "requested_at": iso(row.requested_at),
        "granted_by": row.granted_by,
        "granted_at": iso(row.granted_at),
        "expires_at": iso(row.expires_at),
        "used_at": iso(row.used_at),
    }


def _ttl(resources: Resources, seconds: int | None = None) -> timedelta:
    limit = resources.settings.policy.approval_ttl_seconds
    return timedelta(seconds=min(seconds, limit) if seconds else limit)


async def request_approval(
    resources: Resources, caller: Caller, tool: str, digest: str, arguments: dict[str, Any] | None
) -> Approval:
    """A pending request for this exact call, reusing an open one; committed at once because the
    /execute that asks for it fails (and rolls its own session back)."""
    now = utcnow()
    async with resources.session() as session:
        # One caller's requests take turns across replicas: the same call asked of two at once is one request, and
        # the pending limit counts the other's.
        await take_turn(session, lock_key(APPROVAL_REQUEST_LOCKS, caller.id))
        existing = (
            await session.scalars(
                select(Approval)
                .where(
                    Approval.caller == caller.id,
                    Approval.tool == tool,
                    Approval.arguments_digest == digest,
                    Approval.status == PENDING,
                    Approval.expires_at > now,
                )
                .order_by(Approval.requested_at.desc())
                .limit(1)
            )
        ).first()
        if existing is not None:
            return existing
        await refuse_past_pending_limit(resources, session, caller, now)
        row = Approval(
            id=str(uuid.uuid4()),
            caller=caller.id,
            tool=tool,
            arguments_digest=digest,
            status=PENDING,
            requested_at=now,
            expires_at=now + _ttl(resources),
            arguments=stored_arguments(resources, arguments),
        )
        session.add(row)
        await session.commit()
        return row


async def refuse_past_pending_limit(resources: Resources, session: AsyncSession, caller: Caller, now: datetime) -> None:
    """429 when the caller already has policy.max_pending_approvals waiting: one caller cannot bury the requests
    of others in the approvers' queue (each new argument set of a destructive call asks for one)."""
    limit = resources.settings.policy.max_pending_approvals
    waiting = select(Approval.expires_at).where(
        Approval.caller == caller.id, Approval.status == PENDING, Approval.expires_at > now
    )
    expiries = (await session.scalars(waiting.order_by(Approval.expires_at).limit(limit))).all()
    if len(expiries) >= limit:  # the soonest to expire frees a place, unless an approver decides first
        raise RateLimited(
            f"{counted(limit, 'approval')} of this caller {verb(limit, 'waits', 'wait')} for an approver already "
            "(policy.max_pending_approvals); call again once one is granted, denied or expired",
            retry_after=max(1.0, (as_utc(expiries[0]) - now).total_seconds()),
            limit="policy.max_pending_approvals",
        )


def approval_required(row: Approval, detail: str) -> ApprovalRequired:
    """The 403 that tells the caller which approval to obtain."""
    return ApprovalRequired(
        detail,
        approval_id=row.id,
        approval=approval_view(row),
        grant={
            "method": "POST",
            "path": "/approvals",
            "body": {"approval_id": row.id},
            "by": "a caller with an approver role",
        },
    )


async def consume_approval(resources: Resources, approval_id: str, caller: Caller, tool: str, digest: str) -> None:
    """Mark a granted approval of exactly this call used, or raise why it cannot be used.

    The conditional UPDATE makes the single use atomic; it commits at once so that a call that fails
    upstream afterwards cannot use the approval again."""
    now = utcnow()
    async with resources.session() as session:
        result = await session.execute(
            update(Approval)
            .where(
                Approval.id == approval_id,
                Approval.status == GRANTED,
                Approval.caller == caller.id,
                Approval.tool == tool,
                Approval.arguments_digest == digest,
                Approval.expires_at > now,
            )
            .values(status=USED, used_at=now)
        )
        await session.commit()
        if result.rowcount == 1:  # type: ignore[attr-defined]
            return
        row = await session.get(Approval, approval_id)
    if row is None or row.caller != caller.id:
        raise PermissionDenied(f"Approval {approval_id} does not exist for this caller", approval_id=approval_id)
    if row.tool != tool or row.arguments_digest != digest:
        # Not naming the approval's tool: an approver may have granted one that this caller may not use.
        what = "other arguments" if row.tool == tool else "another tool"
        raise PermissionDenied(f"Approval {approval_id} was given for another call ({what})", approval_id=approval_id)
    state = status_of(row, now)
    reasons = {
        PENDING: "is not granted yet",
        USED: "was already used",
        DENIED: "was denied",
        EXPIRED: "has expired",
    }
    raise approval_required(
        row,
        f"Approval {approval_id} {reasons.get(state, 'cannot be used')}; "
        "call again without approval_id to request a new one",
    )


async def get_approval(
    session: AsyncSession,
    caller: Caller,
    approval_id: str,
    is_approver: bool,
    visible: frozenset[str] | None = None,
) -> Approval:
    """An approval its requester or an approver may see; a requester sees only approvals of tools it may use
    (`visible`, None: every tool), the others are answered like a missing one."""
    row = await session.get(Approval, approval_id)
    if row is None or not (is_approver or (row.caller == caller.id and (visible is None or row.tool in visible))):
        raise NotFound(f"No approval {approval_id!r}", approval_id=approval_id)
    return row


async def list_approvals(
    session: AsyncSession,
    caller: Caller,
    is_approver: bool,
    status: str | None = None,
    limit: int = 100,
    visible: frozenset[str] | None = None,
) -> list[Approval]:
    """Approvals, newest first: all of them for an approver, one's own otherwise (of the tools it may use,
    `visible`; None: every tool)."""
    query = select(Approval).order_by(Approval.requested_at.desc()).limit(limit)
    if not is_approver:
        query = query.where(Approval.caller == caller.id)
        if visible is not None:
            query = query.where(among(Approval.tool, visible) if visible else false())
    if status in (PENDING, GRANTED):
        query = query.where(Approval.status == status, Approval.expires_at > utcnow())
    elif status is not None:
        query = query.where(Approval.status == status)
    return list((await session.scalars(query)).all())


def _check_grantor(resources: Resources, approver: Caller, requester: str) -> None:
    if requester == approver.id and not (approver.is_open or resources.settings.policy.allow_self_approval):
        raise PermissionDenied("An approver may not approve their own call", caller=approver.id)


async def grant_approval(
    resources: Resources,
    session: AsyncSession,
    approver: Caller,
    approval_id: str,
    ttl_seconds: int | None = None,
) -> Approval:
    """Grant a pending request; the call may then be made once before the expiry. The row is locked: a grant or a
    denial on another replica at the same moment makes this one a 409, not a second decision over the first."""
    row = await session.get(Approval, approval_id, with_for_update=True)
    if row is None:
        raise NotFound(f"No approval {approval_id!r}", approval_id=approval_id)
    _check_grantor(resources, approver, row.caller)
    state = status_of(row)
    if state != PENDING:
        raise Conflict(f"Approval {approval_id} is {state}, not pending", approval_id=approval_id, status=state)
    now = utcnow()
    row.status, row.granted_by, row.granted_at = GRANTED, approver.id, now
    row.expires_at = now + _ttl(resources, ttl_seconds)
    await session.flush()
    return row


async def grant_call(
    resources: Resources,
    session: AsyncSession,
    approver: Caller,
    caller_id: str,
    tool: str,
    arguments: dict[str, Any],
    ttl_seconds: int | None = None,
) -> Approval:
    """Approve a call in advance, without a pending request: bound to the caller, tool and arguments."""
    if not caller_id.strip() or not tool.strip():
        raise BadRequest("caller and tool are required to approve a call in advance")
    _check_grantor(resources, approver, caller_id)
    now = utcnow()
    row = Approval(
        id=str(uuid.uuid4()),
        caller=caller_id,
        tool=tool,
        arguments_digest=arguments_digest(arguments),
        arguments=stored_arguments(resources, arguments),
        status=GRANTED,
        requested_at=now,
        granted_by=approver.id,
        granted_at=now,
        expires_at=now + _ttl(resources, ttl_seconds),
    )
    session.add(row)
    await session.flush()
    return row


async def deny_approval(resources: Resources, session: AsyncSession, approver: Caller, approval_id: str) -> Approval:
    """Refuse a pending request (or withdraw a grant not used yet); the row is locked, as in grant_approval (a use
    committing meanwhile makes this a 409: a denial never hides a call that was made)."""
    row = await session.get(Approval, approval_id, with_for_update=True)
    if row is None:
        raise NotFound(f"No approval {approval_id!r}", approval_id=approval_id)
    state = status_of(row)
    if state not in (PENDING, GRANTED):
        raise Conflict(f"Approval {approval_id} is {state}", approval_id=approval_id, status=state)
    row.status, row.granted_by, row.granted_at = DENIED, approver.id, utcnow()
    await session.flush()
    return row
