"""Tools held for an admin's review: text addressed to the model (indexer/screening.py) and, for upstream
servers, a definition that changed after its first listing (a rug pull).

A held tool stays in the catalog of record (`tools.held_reason`) but is in no index, no listing and answers no
call: to any caller but an admin asking for held tools it does not exist. `POST /tools/{name}/approve` releases it
(its definition is then trusted: not held again for the same text)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from indexer.screening import Finding, definition_hash, find_instruction
from service.db.models import Tool, as_utc, held_for_review
from service.settings import PolicySettings

logger = logging.getLogger(__name__)


def _fields(description: str, schema: Any, annotations: Any) -> dict[str, Any]:
    return {"description": description, "input_schema": schema, "annotations": annotations}


def definition_of(row: Tool) -> dict[str, Any]:
    """What the row says the tool does now."""
    return _fields(row.description, row.input_schema, row.annotations)


def stamp(moment: datetime | None) -> str:
    return as_utc(moment).isoformat(timespec="seconds").replace("+00:00", "Z") if moment else "its first listing"


def schema_changes(old: Any, new: Any) -> list[str]:
    """A short account of how an input schema changed: properties added, removed or changed, required, the rest."""
    old, new = old if isinstance(old, dict) else {}, new if isinstance(new, dict) else {}
    changes: list[str] = []
    before, after = old.get("properties") or {}, new.get("properties") or {}
    if isinstance(before, dict) and isinstance(after, dict):
        changes += [f"property added: {k}" for k in after if k not in before]
        changes += [f"property removed: {k}" for k in before if k not in after]
        changes += [f"property changed: {k}" for k in after if k in before and after[k] != before[k]]
    if old.get("required") != new.get("required"):
        changes.append(f"required: {old.get('required') or []} -> {new.get('required') or []}")
    changes += [f"{k} changed" for k in changed_keys(old, new) if k not in ("properties", "required")]
    return changes


def changed_keys(old: Any, new: Any) -> list[str]:
    """The keys whose values differ between two JSON objects (a missing object counts as empty), sorted."""
    old, new = old if isinstance(old, dict) else {}, new if isinstance(new, dict) else {}
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _changes(previous: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, Any] | None:
    if previous is None:
        return None
    return {
        "description": previous.get("description") != now["description"],
        "input_schema": schema_changes(previous.get("input_schema"), now["input_schema"]),
        "annotations": changed_keys(previous.get("annotations"), now["annotations"]),
    }


@dataclass
class Review:
    """How a batch is judged: `listed`, an upstream server's own listing (stdio, http), whose first definition is
    trusted and a later other one held (registrations through the catalog API are their author's: only their text
    is checked); `findings`, the poisoning signatures found in the batch's new and changed definitions."""

    policy: PolicySettings
    listed: bool
    findings: dict[str, Finding | None] = field(default_factory=dict)

    @classmethod
    async def of(cls, tools: list[Any], policy: PolicySettings, *, listed: bool) -> Review:
        """The review of these tools (ToolDefinitions), their text matched in a worker thread: a hostile listing's
        texts cost up to ~7 ms a 16 KB string, which the event loop must not wait for."""
        review = cls(policy, listed)
        if policy.hold_suspicious_tools and tools:
            review.findings = await asyncio.to_thread(lambda: {t.qualified_name: review.finding(t) for t in tools})
        return review

    def finding(self, tool: Any) -> Finding | None:
        if tool.qualified_name in self.findings:
            return self.findings[tool.qualified_name]
        return find_instruction(_fields(tool.description, tool.input_schema, tool.annotations))


def judge(row: Tool, tool: Any, review: Review, *, fresh: bool, now: datetime) -> str | None:
    """Set the hold and trust of `row` for the definition `tool` (a ToolDefinition) about to be written to it,
    before its fields are overwritten (the previous definition is read from them); returns the hold's reason. The
    definition an admin approved is not held again."""
    digest = tool.definition_hash
    definition = _fields(tool.description, tool.input_schema, tool.annotations)
    policy, listed = review.policy, review.listed
    reasons: list[str] = []
    found = None
    if digest != row.approved_hash:
        if policy.hold_suspicious_tools and (found := review.finding(tool)) is not None:
            reasons.append(found.reason)
        if listed and policy.hold_changed_tools and row.trusted_hash is not None and digest != row.trusted_hash:
            reasons.append(f"definition changed since {stamp(row.trusted_at)}")
    held_before = row.held_reason is not None
    if reasons:
        hold = dict(row.hold or {}) if held_before else {"held_at": stamp(now)}
        if not held_before:  # what agents were given until now; a tool held already keeps the one before
            hold["previous"] = None if fresh else definition_of(row)
        hold.update(
            reasons=reasons,
            field=found.field if found else None,
            at=found.at if found else None,
            matched=found.matched if found else None,
            changes=_changes(hold.get("previous"), definition),
        )
        row.held_reason, row.hold = "; ".join(reasons), hold
    else:
        row.held_reason, row.hold = None, None
    if not listed:
        row.trusted_hash, row.trusted_at = None, None
    elif not reasons and row.trusted_hash != digest:
        # Trust on first use (the first clean listing: an upgrade from before 0010 or a bundled catalog's row
        # included), or the definition an admin approved listed again.
        row.trusted_hash, row.trusted_at = digest, now
    return row.held_reason


def judged(held: dict[str, str], row: Tool, tool: Any, review: Review, **how: Any) -> None:
    """judge() the row, keeping `held` (name -> reason) of the batch in step, and log a new hold."""
    reason = judge(row, tool, review, **how)
    if reason is None:
        held.pop(tool.qualified_name, None)
    else:
        held[tool.qualified_name] = reason
        logger.warning("tool %s held for review: %s", tool.qualified_name, reason[:300])


async def trust(session: AsyncSession, tools: list[Any], now: datetime) -> None:
    """Trust these definitions (ToolDefinitions of unchanged rows no upstream listed yet), one statement."""
    if tools:
        rows = [
            {"qualified_name": t.qualified_name, "trusted_hash": t.definition_hash, "trusted_at": now} for t in tools
        ]
        await session.execute(update(Tool), rows)


def held_view(row: Tool) -> dict[str, Any]:
    """What an admin is shown of a held tool: why, what matched, and the definition agents were given before."""
    hold = row.hold or {}
    return {"reason": row.held_reason, **hold}


async def held_by_server(session: AsyncSession, server_id: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The held tools of every server (or one): name and reason, by server."""
    query = select(Tool.server_id, Tool.qualified_name, Tool.held_reason).where(held_for_review())
    if server_id is not None:
        query = query.where(Tool.server_id == server_id)
    held: dict[str, list[dict[str, Any]]] = {}
    for server, name, reason in (await session.execute(query.order_by(Tool.qualified_name))).tuples():
        held.setdefault(server, []).append({"name": name, "reason": reason})
    return held


def release(row: Tool, now: datetime, *, listed: bool) -> None:
    """An admin approved the row's definition: not held, trusted (upstream tools) and not held again for it."""
    digest = definition_hash(row.description, row.input_schema, row.annotations)
    row.held_reason, row.hold, row.approved_hash = None, None, digest
    if listed:
        row.trusted_hash, row.trusted_at = digest, now
