"""Approvals of destructive calls decided on two replicas at once (one PostgreSQL database, in one process): one
request per call, one decision per request, and a denial never hides a call that was made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.db.models import Approval
from service.errors import ApprovalRequired, Conflict
from service.policy import approvals
from service.policy.callers import Caller
from service.resources import Resources
from tests.cluster.cluster_support import replicas_in_process

pytestmark = pytest.mark.postgres

AGENT = Caller(id="agent", roles=frozenset({"developer"}))
BOSS = Caller(id="boss", roles=frozenset({"approver"}))
TOOL, DIGEST = "files__delete_file", approvals.arguments_digest({"path": "/tmp/x"})


@pytest.fixture
async def replicas(tmp_path: Path, postgres_url: str) -> AsyncIterator[list[Resources]]:
    async with replicas_in_process(tmp_path, postgres_url) as started:
        yield started


async def _decide(resources: Resources, decide: str, approval_id: str) -> str:
    """Grant or deny in a request's own session; the status reached, or the refusal's class."""
    try:
        async with resources.session() as session:
            if decide == "grant":
                row = await approvals.grant_approval(resources, session, BOSS, approval_id)
            else:
                row = await approvals.deny_approval(resources, session, BOSS, approval_id)
            await session.commit()
            return row.status
    except Conflict:
        return "conflict"


async def _use(resources: Resources, approval_id: str) -> str:
    try:
        await approvals.consume_approval(resources, approval_id, AGENT, TOOL, DIGEST)
        return "used"
    except ApprovalRequired:
        return "refused"


async def _statuses(resources: Resources) -> list[str]:
    async with resources.session() as session:
        return sorted((await session.scalars(select(Approval.status).where(Approval.tool == TOOL))).all())


async def test_one_call_asked_of_two_replicas_at_once_is_one_request(replicas: list[Resources]) -> None:
    for _ in range(3):
        rows = await asyncio.gather(*(approvals.request_approval(r, AGENT, TOOL, DIGEST, None) for r in replicas))
        assert rows[0].id == rows[1].id
    async with replicas[0].session() as session:
        assert await session.scalar(select(func.count()).select_from(Approval)) == 1


async def test_a_request_granted_on_two_replicas_at_once_is_granted_once(replicas: list[Resources]) -> None:
    for round_ in range(3):
        pending = await approvals.request_approval(replicas[0], AGENT, TOOL, DIGEST, None)
        decided = await asyncio.gather(*(_decide(r, "grant", pending.id) for r in replicas))
        assert sorted(decided) == ["conflict", "granted"], decided
        assert await _use(replicas[round_ % 2], pending.id) == "used"
    assert await _statuses(replicas[0]) == ["used"] * 3


async def test_a_grant_used_on_one_replica_while_denied_on_another_ends_as_what_happened(
    replicas: list[Resources],
) -> None:
    outcomes = set()
    for round_ in range(6):
        pending = await approvals.request_approval(replicas[0], AGENT, TOOL, DIGEST, None)
        assert await _decide(replicas[0], "grant", pending.id) == "granted"

        async def deny(delay: float = round_ * 0.002, approval_id: str = pending.id) -> str:
            await asyncio.sleep(delay)
            return await _decide(replicas[1], "deny", approval_id)

        used, denied = await asyncio.gather(_use(replicas[0], pending.id), deny())
        assert (used, denied) in (("used", "conflict"), ("refused", "denied")), (used, denied)
        outcomes.add(used)
        async with replicas[0].session() as session:
            row = await session.get(Approval, pending.id)
            assert row is not None and row.status == ("used" if used == "used" else "denied")
    assert outcomes  # which one won each round depends on timing; the row always says what happened
