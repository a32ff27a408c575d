"""The spill file of a log (executions, searches): rows the database could not take yet, kept on disk until it can.

Append-only JSON lines, each append fsync'd before it counts. A replay first renames the file to
`<name>.replaying` (new spills go to a fresh file meanwhile), inserts what it reads, and deletes the
renamed file only once every row is committed; a replay that fails leaves it for the next attempt, and a
crash in the middle of one is finished by the next start (inserts skip rows already there). A torn line
(a crash in the middle of an append) is moved to `<name>.corrupt` with a warning: it never stops a start.

In a folder shared by the replicas (`db.spill_dir`, a volume), each process spills to a file of its own,
`<stem>.<instance><suffix>`, whose `.lock` it holds (flock) for as long as it lives, and a replay also claims the
files whose lock no process holds: those of a replica that died or was recreated with an empty data folder, which
no start would have replayed before. A start, the end of a writer's own outage and `orphans_waiting` (which the writers
ask every LOOK_SECONDS) lead to such a replay: a replica killed during an outage of its own (its link to the database
cut, the others' not) left its answered calls out of the log until some replica started, for as long as none did."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from service.db.engine import PRIVATE_FILE_MODE, private_folder

logger = logging.getLogger(__name__)

Insert = Callable[[list[dict[str, Any]]], Awaitable[None]]
# How often a writer looks for the files of replicas that are gone (a listing of the shared folder).
LOOK_SECONDS = 5.0


def spill_location(data_dir: Path, spill_dir: Path | None, name: str) -> tuple[Path, bool]:
    """Where a log spills, and whether the folder is shared by the replicas (`db.spill_dir` set)."""
    return (spill_dir / name, True) if spill_dir is not None else (data_dir / name, False)


class SpillFile:
    """One append-only, fsync'd JSON-lines file and its crash-safe replay."""

    def __init__(
        self,
        path: Path,
        chunk_size: int = 500,
        label: str = "execution log",
        datetime_fields: tuple[str, ...] = ("started_at", "finished_at"),
        shared: bool = False,
    ) -> None:
        self.family = path  # shared: every replica's file is named after it
        self._lock: int | None = None
        if shared:
            path = path.with_name(f"{path.stem}.{uuid.uuid4().hex[:12]}{path.suffix}")
            self._lock = _try_lock(_lock_path(path))
            assert self._lock is not None  # a fresh name: nobody else holds it
        self.shared = shared
        self.path = path
        self.label = label
        self.datetime_fields = datetime_fields
        self.replaying = path.with_name(path.name + ".replaying")
        self.corrupt = path.with_name(path.name + ".corrupt")
        self.chunk_size = chunk_size
        self.appended = 0
        self._next_look = 0.0

    @property
    def look_seconds(self) -> float | None:
        """How long a writer with nothing to write may sleep before asking `orphans_waiting` (None: never asks)."""
        return LOOK_SECONDS if self.shared else None

    def orphans_waiting(self) -> bool:
        """Whether a file of a process that is gone waits in the shared folder (looked at every LOOK_SECONDS at
        most; False in between and without a shared folder): the writer replays, claiming it."""
        if not self.shared or time.monotonic() < self._next_look:
            return False
        self._next_look = time.monotonic() + LOOK_SECONDS
        for other in self._others():
            lock = _try_lock(_lock_path(other))
            if lock is not None:
                os.close(lock)
                return True
        return False

    def has_rows(self) -> bool:
        """Something waits to be replayed (here, or in a shared folder's file of a replica that may be gone)."""
        return self.has_own_rows() or any(True for _ in self._others())

    def close(self) -> None:
        """Let go of this process's file: a later replay anywhere may claim what is left in it."""
        if self._lock is not None:
            if not self.has_own_rows():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(_lock_path(self.path))
            os.close(self._lock)
            self._lock = None

    def has_own_rows(self) -> bool:
        return any(p.exists() and p.stat().st_size > 0 for p in (self.path, self.replaying))

    def _others(self) -> list[Path]:
        """A shared folder's spill files of other processes (their base names), not this one's."""
        if not self.shared or not self.path.parent.is_dir():
            return []
        stem, suffix = self.family.stem, self.family.suffix
        found = set()
        for file in self.path.parent.iterdir():
            name = file.name.removesuffix(".replaying")
            ours = (name.startswith(stem + ".") and name.endswith(suffix)) or name == stem + suffix
            try:
                if ours and name != self.path.name and file.stat().st_size > 0:
                    found.add(file.with_name(name))
            except FileNotFoundError:
                continue  # replayed by another replica meanwhile
        return sorted(found)

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
        total = await self._replay(self.path, insert)
        for other in self._others():
            lock = _try_lock(_lock_path(other))
            if lock is None:
                continue  # its replica lives and replays it itself
            try:
                logger.info("%s: claiming %s, left by a replica that is gone", self.label, other)
                total += await self._replay(other, insert)
                _lock_path(other).unlink(missing_ok=True)
            finally:
                os.close(lock)
        self._drop_stale_locks()
        return total

    def _drop_stale_locks(self) -> None:
        """The lock files of replicas that are gone with nothing spilled (one a start, else they pile up)."""
        if not self.shared:
            return
        prefix, own = self.family.stem + ".", _lock_path(self.path).name
        for name in os.listdir(self.path.parent):
            if not (name.startswith(prefix) and name.endswith(".lock")) or name == own:
                continue
            data = self.path.parent / name.removesuffix(".lock")
            lock = _try_lock(self.path.parent / name)
            if lock is None:
                continue
            try:
                if not _present(data) and not _present(data.with_name(data.name + ".replaying")):
                    os.unlink(self.path.parent / name)
            finally:
                os.close(lock)

    async def _replay(self, path: Path, insert: Insert) -> int:
        total = 0
        replaying = path.with_name(path.name + ".replaying")
        if _present(replaying):
            total += await self._replay_file(replaying, insert)  # a replay interrupted by a crash
        if _present(path):
            os.replace(path, replaying)
            _fsync_dir(path.parent)
            total += await self._replay_file(replaying, insert)
        return total

    async def _replay_file(self, replaying: Path, insert: Insert) -> int:
        rows = self._read(replaying)
        if rows:
            logger.info("%s: replaying %d spilled rows from %s", self.label, len(rows), replaying)
        for start in range(0, len(rows), self.chunk_size):
            await insert(rows[start : start + self.chunk_size])
        with contextlib.suppress(FileNotFoundError):
            os.unlink(replaying)
        _fsync_dir(replaying.parent)
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


def _present(path: Path) -> bool:
    return path.exists()  # a local file's metadata: too quick for a thread


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _try_lock(path: Path) -> int | None:
    """An exclusive flock on `path` (created), held by the returned descriptor; None when a live process holds it.
    The kernel lets it go when its process ends, however it ends."""
    private_folder(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


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
    private_folder(path.parent)
    created = not path.exists()
    # Only this user's: a spilled row is a caller's query, or the record of its call.
    with os.fdopen(os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE), "ab+") as handle:
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
