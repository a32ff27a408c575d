"""The spill file of a log (executions, searches): rows the database could not take yet, kept on disk until it can.

Append-only JSON lines, each append fsync'd before it counts. A replay first renames the file to
`<name>.replaying` (new spills go to a fresh file meanwhile), inserts what it reads, and deletes the
renamed file only once every row is committed; a replay that fails leaves it for the next attempt, and a
crash in the middle of one is finished by the next start (inserts skip rows already there). A torn line
(a crash in the middle of an append) is moved to `<name>.corrupt` with a warning: it never stops a start."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

Insert = Callable[[list[dict[str, Any]]], Awaitable[None]]


class SpillFile:
    """One append-only, fsync'd JSON-lines file and its crash-safe replay."""

    def __init__(
        self,
        path: Path,
        chunk_size: int = 500,
        label: str = "execution log",
        datetime_fields: tuple[str, ...] = ("started_at", "finished_at"),
    ) -> None:
        self.path = path
        self.label = label
        self.datetime_fields = datetime_fields
        self.replaying = path.with_name(path.name + ".replaying")
        self.corrupt = path.with_name(path.name + ".corrupt")
        self.chunk_size = chunk_size
        self.appended = 0

    def has_rows(self) -> bool:
        """Something waits to be replayed."""
        return any(p.exists() and p.stat().st_size > 0 for p in (self.path, self.replaying))

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Write rows, one per line, and fsync; returns once they are on disk."""
        if not rows:
            return
        lines = "".join(json.dumps(row, default=_json_default, separators=(",", ":")) + "\n" for row in rows)
        _append_durably(self.path, lines)
        self.appended += len(rows)

    async def replay(self, insert: Insert) -> int:
        """Insert every spilled row (`insert` must skip ids already stored); the rows replayed.

        Exceptions of `insert` propagate, leaving the rows on disk for the next replay."""
        total = 0
        if self.replaying.exists():
            total += await self._replay_file(insert)  # a replay interrupted by a crash
        if self.path.exists():
            os.replace(self.path, self.replaying)
            _fsync_dir(self.path.parent)
            total += await self._replay_file(insert)
        return total

    async def _replay_file(self, insert: Insert) -> int:
        rows = self._read(self.replaying)
        if rows:
            logger.info("%s: replaying %d spilled rows from %s", self.label, len(rows), self.replaying)
        for start in range(0, len(rows), self.chunk_size):
            await insert(rows[start : start + self.chunk_size])
        self.replaying.unlink(missing_ok=True)
        _fsync_dir(self.path.parent)
        return len(rows)

    def _read(self, path: Path) -> list[dict[str, Any]]:
        rows, bad = [], []
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                row = _parse(raw, self.datetime_fields)
                if row is None:
                    logger.warning(
                        "%s: %s line %d is torn or corrupt; moved to %s", self.label, path, number, self.corrupt
                    )
                    bad.append(raw.rstrip(b"\n").decode("utf-8", "replace") + "\n")
                else:
                    rows.append(row)
        if bad:
            _append_durably(self.corrupt, "".join(bad))
        return rows


def _parse(raw: bytes, datetime_fields: tuple[str, ...]) -> dict[str, Any] | None:
    try:
        row = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        return None
    try:
        for key in datetime_fields:
            if isinstance(row.get(key), str):
                row[key] = datetime.fromisoformat(row[key])
    except ValueError:
        return None
    return row


def _append_durably(path: Path, text: str) -> None:
    """Append and fsync; a torn last line from a crash gets its newline first so it stays one bad line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    with path.open("ab+") as handle:
        if handle.tell() > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")
        handle.write(text.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    if created:
        _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make a file's creation, rename or removal durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
