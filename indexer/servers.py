"""The text indexed for a server: what it says about itself (id, name, title, description, instructions). Pure
functions.

Not the names of its tools: a caller who may use some of a server's tools would see the server's score move as
tools it may not see are added or removed. Without them the bundled real catalogs' requests rank better too
(docs/quality-history.md)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from indexer.documents import split_identifier

INFO_FIELDS = ("name", "title", "description", "instructions")
MAX_INFO_CHARS = 2000  # per field: instructions can run to pages; MiniLM reads ~256 tokens anyway
# What is read of a field before its whitespace is collapsed: a server's 15 MB of instructions were screened and
# split whole, on the event loop, at each of its syncs (3.6 s), to keep their first 2,000 characters.
MAX_READ_INFO_CHARS = 16 * MAX_INFO_CHARS


def info_fields(raw: Any) -> dict[str, str]:
    """The INFO_FIELDS strings of an info block, each cut at MAX_READ_INFO_CHARS (the rest is never used)."""
    if not isinstance(raw, Mapping):
        return {}
    return {f: text[:MAX_READ_INFO_CHARS] for f in INFO_FIELDS if isinstance(text := raw.get(f), str)}


def server_info(raw: Any) -> dict[str, str]:
    """The string fields of an MCP server info block (`serverInfo` plus the `instructions` of initialize)."""
    fields = info_fields(raw)
    return {f: " ".join(text.split())[:MAX_INFO_CHARS] for f, text in fields.items() if text.strip()}


def server_document(server_id: str, info: Mapping[str, str]) -> str:
    """Id, title and description first, instructions last (the model truncates)."""
    words = dict.fromkeys(split_identifier(n) for n in (server_id, info.get("name", "")) if n)
    head = " ".join(words)
    parts = [head, info.get("title", ""), info.get("description", ""), info.get("instructions", "")]
    return ". ".join(p.strip(" .") for p in parts if p.strip(" ."))


def server_hash(document: str) -> str:
    """Whether a server's vector must be embedded again."""
    return hashlib.sha256(json.dumps(document).encode()).hexdigest()
