"""What servers say about themselves (MCP serverInfo name, title, description and initialize's instructions),
kept on their catalog rows for server-aware scoring (service/search/servers.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from indexer.screening import find_hidden, find_instruction
from indexer.servers import info_fields, server_info
from service.catalog.files import DEMO_CATALOGS, load_catalog_file
from service.catalog.holds import changed_keys, stamp
from service.cluster.changes import TOOLS, record_change
from service.db.models import Server, utcnow

logger = logging.getLogger(__name__)


async def store_info(
    session: AsyncSession,
    servers: Mapping[str, Any],
    origin: str,
    *,
    hold: bool = False,
    notes: list[str] | None = None,
) -> set[str]:
    """Merge the info of these existing servers (server id -> info block); returns the ids whose info changed.
    Each gets a change row without tool names, so other replicas refresh that server's document. With `hold` (an
    upstream listed before, holds of changed tools on: its first listing's info was taken, over what a bundled
    catalog said, as a tool's first definition is), a field that now says otherwise, or one it did not give, is not
    taken: the new block waits in `held_info` for an admin (approve_info), ranking keeps the approved text, and `notes`
    (the sync's report, the server's `last_error`) say so."""
    changed: set[str] = set()
    for server_id, raw in sorted(servers.items()):
        given = server_info(raw)
        row = await session.get(Server, server_id)
        if row is None or not given:
            continue
        # Merged over what is known: a real server's initialize often gives only its name, and must not wipe the
        # description its bundled catalog file gave. What a source does give replaces the older value.
        known = row.info or {}
        info = {**known, **given}
        if hold and (fields := changed_keys({k: known.get(k) for k in given}, given)):
            _hold(row, info, fields)
            if notes is not None:
                reason = f"{row.held_info['reason']}; held for an admin's review"
                notes.append(f"server {row.id}: {reason} (`toolscout tools approve-info {row.id}` takes it)")
            continue
        row.held_info = None  # the approved text again (or its first listing): nothing left to review
        if row.info != info:
            row.info = info
            record_change(session, TOOLS, [], server=server_id, origin=origin)
            changed.add(server_id)
    return changed


def _hold(row: Server, info: dict[str, Any], fields: list[str]) -> None:
    if row.held_info is not None and row.held_info.get("info") == info:
        return  # held already (a restart lists the same change): its first time stays
    previous = {k: (row.info or {}).get(k) for k in fields}
    row.held_info = {
        "reason": f"server info changed after it was taken: {', '.join(fields)}",
        "held_at": stamp(utcnow()),
        "changes": fields,
        "previous": previous,
        "info": info,
    }
    logger.warning("server %s: %s, held for review", row.id, row.held_info["reason"])


def screen_info(raw: Any) -> tuple[dict[str, Any], list[str]]:
    """A server's info block without the text fields that hold invisible characters or address the model, and
    what was dropped. They reach only ranking (the server's document), never an agent; dropped, not refused, so
    the server's tools still sync, and said in its `last_error` and the log."""
    if not isinstance(raw, Mapping):
        return {}, []
    kept, dropped = dict(raw), []
    for name, text in info_fields(raw).items():  # what server_info may keep of each, not megabytes past it
        found = find_hidden({name: text}) or find_instruction({name: text})
        if found is not None:
            del kept[name]
            dropped.append(f"{found.reason}; its {name} is not used")
    return kept, dropped


def screened(infos: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """These servers' info blocks (server id -> block) screened; what was dropped is added to `notes` and logged."""
    kept: dict[str, Any] = {}
    for server_id, info in infos.items():
        kept[server_id], dropped = screen_info(info)
        for note in dropped:
            notes.append(f"server {server_id}: {note}")
            logger.warning("server %s: %s", server_id, note)
    return kept


def demo_servers() -> dict[str, dict[str, Any]]:
    """The server info blocks of the bundled catalogs (file name -> the file's `server` object)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(DEMO_CATALOGS.glob("*.json")):
        out.update(load_catalog_file(path).servers)
    return out
