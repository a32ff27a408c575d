"""Child processes (stdio MCP servers) die with the service, even when it is killed with SIGKILL.

Three layers: each child leads its own process group (so one signal reaches its own children, npx -> node);
on Linux a child is started through a tiny exec wrapper that sets PR_SET_PDEATHSIG (the kernel kills it
when the service dies) and then becomes the server (same pid); and every child is recorded, with its
start time, in `<data>/children/<service pid>.json`, so the next start kills whatever a dead service left
behind (a grandchild that outlived its parent, or a platform without PDEATHSIG). Start times make the
cleanup safe against reused pids: only processes of the recorded group born at or after the recorded child
are killed."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

from service.errors import counted

logger = logging.getLogger(__name__)

PROC = Path("/proc")
# Runs in the child between fork and the server: kill me when my parent dies, unless it already has.
_WRAPPER = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None,use_errno=True).prctl(1,signal.SIGKILL)\n"  # 1 = PR_SET_PDEATHSIG
    "os.getppid()==int(sys.argv[1]) or os._exit(70)\n"
    "os.execvp(sys.argv[2],sys.argv[2:])\n"
)


def pdeathsig_supported() -> bool:
    """Linux only: PR_SET_PDEATHSIG is a Linux prctl."""
    return sys.platform.startswith("linux")


def wrap_command(command: str, args: list[str], path: str | None = None, cwd: str | None = None) -> list[str]:
    """The argv that starts `command` so that it dies with this process.

    Unchanged where unsupported, and when the command cannot be found (`path` is the child's PATH), so that
    starting it fails in the parent with the usual error instead of in the wrapper."""
    if not pdeathsig_supported():
        return [command, *args]
    if os.sep in command:
        found = os.path.join(cwd or "", command)
        resolved = found if os.path.isfile(found) and os.access(found, os.X_OK) else None
    else:
        resolved = shutil.which(command, path=path)
    if resolved is None:
        return [command, *args]
    return [sys.executable, "-I", "-S", "-c", _WRAPPER, str(os.getpid()), command, *args]


def process_info(pid: int) -> tuple[int, int] | None:
    """(process group, start time in clock ticks since boot) of a live process; None if gone or unknown."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):  # a zombie is already dead
        return None
    return int(fields[2]), int(fields[19])


class ChildRegistry:
    """This service's record of its children, and the cleanup of those of dead services."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / f"{os.getpid()}.json"
        self._children: dict[int, int] = {}

    def add(self, pid: int) -> None:
        """Record a child that was just started."""
        info = process_info(pid)
        if info is None:
            return  # already gone (or no /proc): nothing a later start could safely identify
        self._children[pid] = info[1]
        self._save()

    def discard(self, pid: int | None) -> None:
        """Forget a child that was stopped."""
        if pid is not None and self._children.pop(pid, None) is not None:
            self._save()

    def close(self) -> None:
        """A clean shutdown stopped every child: drop the record."""
        self._children.clear()
        self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        own = process_info(os.getpid())
        record = {"pid": os.getpid(), "start": own[1] if own else 0, "children": self._children}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        os.replace(temporary, self.path)

    def clean_up_after_dead_services(self) -> int:
        """Kill the leftover children of every recorded service that is no longer running; the count killed."""
        if not self.folder.is_dir():
            return 0
        killed = 0
        for path in sorted(self.folder.glob("*.json")):
            try:
                record = json.loads(path.read_text())
                owner, owner_start = int(record["pid"]), int(record["start"])
                children = {int(pid): int(start) for pid, start in record["children"].items()}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("children: unreadable record %s (%s); removed", path, exc)
                path.unlink(missing_ok=True)
                continue
            if path == self.path:
                continue
            info = process_info(owner)
            if info is not None and info[1] == owner_start:
                continue  # that service is alive (another replica sharing this data folder)
            for pid, start in children.items():
                killed += _kill_group(pid, start)
            path.unlink(missing_ok=True)
        if killed:
            left = counted(killed, "process", "processes")
            logger.warning("children: killed %s left running by a service that died", left)
        return killed


def _kill_group(leader: int, leader_start: int) -> int:
    """SIGKILL the members of `leader`'s process group born at or after it; the count."""
    victims = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        info = process_info(int(entry.name))
        if info is not None and info[0] == leader and info[1] >= leader_start:
            victims.append(int(entry.name))
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(victims)
