"""What is known of an upstream connection: its health (GET /servers), the reconnection backoff, and one-line
accounts of failures."""

from __future__ import annotations

import signal
import statistics
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from indexer.servers import MAX_INFO_CHARS, info_fields
from service.db.models import utcnow
from service.errors import counted

# Of what a server says in an error: a JSON-RPC error's message is as long as the server likes (up to
# execution.max_message_bytes), and it reaches the caller's answer, a script, the execution log and GET /servers.
MAX_SAID_CHARS = 2000


def said(text: str) -> str:
    """A server's own words in an error, cut to MAX_SAID_CHARS (saying how long they were)."""
    if len(text) <= MAX_SAID_CHARS:
        return text
    return f"{text[:MAX_SAID_CHARS]}… ({len(text):,} characters)"


def sync_problems(report: Any) -> list[str]:
    """What a listing's sync into the catalog refused or held, and its notes: the server's last_error."""
    problems: list[str] = []
    if refused := getattr(report, "errors", None):
        first = refused[0]
        problems.append(
            f"{counted(len(refused), 'listed tool')} refused; first: {first.tool[:80]!r}, {first.field}: {first.reason}"
        )
    if held := getattr(report, "held", None):
        name, reason = min(held.items())
        problems.append(
            f"{counted(len(held), 'listed tool')} held for an admin's review; first: {name}: {reason[:300]}"
        )
    problems.extend(getattr(report, "notes", None) or [])
    return problems


def describe(exc: BaseException) -> str:
    """A one-line account of an exception, looking inside exception groups (what a server said: `said`)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {said(exc.message)}"
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"command not found: {said(str(exc.filename))}"
    text = said(str(exc).strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"the server process exited with code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"the server process exited with code {code}"


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnection attempts: initial * 2^(failures-1), capped."""

    initial: float = 0.5
    maximum: float = 30.0

    def delay(self, failures: int) -> float:
        return float(min(self.maximum, self.initial * 2.0 ** max(0, failures - 1)))


@dataclass
class ServerHealth:
    """What GET /servers reports of one connection."""

    state: str = "starting"
    last_error: str | None = None
    last_error_at: datetime | None = None
    restarts: int = 0
    pid: int | None = None
    protocol_version: str | None = None
    server_name: str | None = None
    server_version: str | None = None
    connected_at: datetime | None = None
    last_sync_at: datetime | None = None
    tools: int = 0
    syncs: int = 0
    list_changed: int = 0
    calls: int = 0
    failures: int = 0
    timeouts: int = 0
    in_flight: int = 0
    next_attempt_in: float | None = None
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=512))

    def introduced(
        self, protocol_version: str | None, info: types.Implementation | None, instructions: str | None
    ) -> dict[str, str]:
        """Note what a server said of itself at initialize, its name and version cut at MAX_INFO_CHARS (a server
        may send megabytes of each, which GET /servers repeated); its info block for the catalog, each field cut
        at what the catalog reads of it (indexer/servers.py)."""
        self.protocol_version = protocol_version
        self.server_name = info.name[:MAX_INFO_CHARS] if info else None
        self.server_version = info.version[:MAX_INFO_CHARS] if info else None
        return info_fields({**(info.model_dump(exclude_none=True) if info else {}), "instructions": instructions or ""})

    def error(self, message: str) -> None:
        self.last_error, self.last_error_at = message, utcnow()

    def as_dict(self) -> dict[str, Any]:
        recent = sorted(self.latencies_ms)
        latency = None
        if recent:
            latency = {
                "p50_ms": round(statistics.median(recent), 3),
                "p95_ms": round(recent[min(len(recent) - 1, int(len(recent) * 0.95))], 3),
                "max_ms": round(recent[-1], 3),
                "samples": len(recent),
            }
        return {
            "state": self.state,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at.isoformat() if self.last_error_at else None,
            "restarts": self.restarts,
            "pid": self.pid,
            "protocol_version": self.protocol_version,
            "server_info": {"name": self.server_name, "version": self.server_version}
            if self.server_name
            else None,
            "connected_at": self.connected_at.isoformat() if self.connected_at else None,
            "last_sync_at": self.last_sync_at.isoformat() if self.last_sync_at else None,
            "tools": self.tools,
            "syncs": self.syncs,
            "list_changed": self.list_changed,
            "calls": self.calls,
            "failures": self.failures,
            "timeouts": self.timeouts,
            "in_flight": self.in_flight,
            "next_attempt_in": self.next_attempt_in,
            "latency": latency,
        }
