"""Approvals keep the digest and the argument names, not the values, unless raw arguments are logged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from service.db.models import Approval
from tests.security.conftest import TOOLS, assert_problem, bearer, cli_key, make_settings, running

SECRET = "card-4111-1111-1111-1111"


async def request_approval(http: Any, dev: str) -> dict[str, Any]:
    arguments = {"service": "billing", "token": SECRET}
    response = await http.post(
        "/execute", json={"name": "util__purge_cache", "arguments": arguments}, headers=bearer(dev)
    )
    assert response.status_code == 403 and response.json()["type"].endswith("/approval-required")
    return dict(response.json())


async def stored(app: Any) -> list[Approval]:
    async with app.state.resources.session() as session:
        return list((await session.scalars(select(Approval))).all())


async def test_approvals_store_and_return_no_argument_values(world: dict[str, Any]) -> None:
    http, dev, approver, app = world["http"], world["dev"], world["approver"], world["app"]
    problem = await request_approval(http, dev)
    assert SECRET not in json.dumps(problem)
    assert problem["approval"]["arguments"] == {"service": "***", "token": "***"}
    listed = await http.get("/approvals", headers=bearer(approver))
    one = await http.get(f"/approvals/{problem['approval_id']}", headers=bearer(approver))
    assert SECRET not in listed.text and SECRET not in one.text
    assert len(one.json()["arguments_digest"]) == 64
    rows = await stored(app)
    assert len(rows) == 1 and SECRET not in json.dumps(rows[0].arguments)
    advance = {"caller": "dev-agent", "tool": "util__purge_cache", "arguments": {"token": SECRET}}
    granted = await http.post("/approvals", json=advance, headers=bearer(approver))
    assert granted.status_code == 200 and SECRET not in granted.text
    assert all(SECRET not in json.dumps(r.arguments) for r in await stored(app))


async def test_raw_arguments_are_kept_when_configured(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, execution={"log_raw_arguments": True})
    async with running(settings) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        assert (await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))).status_code == 200
        dev = await cli_key(app, "dev-agent", ["dev"])
        problem = await request_approval(http, dev)
        assert problem["approval"]["arguments"]["token"] == SECRET


async def test_a_caller_cannot_flood_the_approvers_queue(tmp_path: Path) -> None:
    """Each destructive call with new arguments asks for an approval: past policy.max_pending_approvals waiting
    ones, a caller's next call is a 429 naming the limit, not one more request the approvers must wade through."""
    async with running(make_settings(tmp_path, policy={"max_pending_approvals": 3})) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        assert (await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))).status_code == 200
        dev = await cli_key(app, "dev-agent", ["dev"])

        async def purge(service: str) -> Any:
            body = {"name": "util__purge_cache", "arguments": {"service": service}}
            return await http.post("/execute", json=body, headers=bearer(dev))

        for i in range(3):
            assert (await purge(f"s{i}")).json()["type"].endswith("/approval-required")
        assert (await purge("s0")).json()["type"].endswith("/approval-required")  # the same call: its request
        refused = assert_problem(await purge("s3"), 429, "rate-limited")
        assert refused["limit"] == "policy.max_pending_approvals" and "3 approvals" in refused["detail"]
        assert len(await stored(app)) == 3
        other = await cli_key(app, "other-agent", ["dev"])  # another caller's queue is its own
        body = {"name": "util__purge_cache", "arguments": {"service": "s9"}}
        assert (await http.post("/execute", json=body, headers=bearer(other))).status_code == 403


async def test_an_approval_keeps_a_bounded_list_of_argument_names(world: dict[str, Any]) -> None:
    """Measured before: 20 destructive calls of one dev key with 110,000 argument names each (1.9 MB bodies) put
    43 MB into the approvers' GET /approvals (1.5 s), every name kept; the digest still binds all of them."""
    http, dev, approver = world["http"], world["dev"], world["approver"]
    arguments = {f"{'n' * 300}{i:05d}": i for i in range(5_000)}
    asked = await http.post("/execute", json={"name": "util__purge_cache", "arguments": arguments}, headers=bearer(dev))
    assert asked.status_code == 403, asked.text[:300]
    kept = asked.json()["approval"]["arguments"]
    assert len(kept) == 101 and max(len(name) for name in kept) <= 128
    assert kept["…"] == "4900 more arguments"
    listed = await http.get("/approvals", headers=bearer(approver))
    assert len(listed.content) < 20_000
    granted = await http.post("/approvals", json={"approval_id": asked.json()["approval_id"]}, headers=bearer(approver))
    assert granted.status_code == 200
    fewer = dict(list(arguments.items())[:100])  # the names shown are not what the approval binds: the digest is
    call = {"name": "util__purge_cache", "arguments": fewer, "approval_id": asked.json()["approval_id"]}
    assert_problem(await http.post("/execute", json=call, headers=bearer(dev)), 403)
