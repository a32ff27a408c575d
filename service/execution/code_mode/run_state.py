"""One script run's state while it goes, the record of each call it made, and the errors it ends with."""

from __future__ import annotations

import asyncio
import difflib
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from service.execution.executor import ExecutionResult
from service.policy.callers import Caller

# A script that ends without `return` finishes with a null result and no error, which read as a lost answer.
NO_RETURN = (
    "the script returned nothing (undefined), so `result` is null: end it with `return VALUE` to get a value back"
)


# What a script has of its own: a name of the MCP front end's meta-tools, or a tool written bare, was only the
# engine's "call_tool is not defined", though run_script's own description says `tools.<name>`.
SCRIPT_GLOBALS = ("tools", "search_tools", "console")
_CALL_A_TOOL = 'in a script a tool is called as `await tools.NAME(arguments)` (or `tools["NAME"](arguments)`)'
_FRONT_END_NAMES = {
    "call_tool": f"{_CALL_A_TOOL}; call_tool is the MCP front end's meta-tool",
    "fetch_result": (
        "a script gets each tool's whole result; fetch_result is the MCP front end's meta-tool, for a return value "
        "that comes back cut (its result_id)"
    ),
    "run_script": "a script cannot start another one; call its tools as `await tools.NAME(arguments)`",
}
_UNDEFINED = re.compile(r"(\S{1,256}) is not defined")


def undefined_name_hint(error: dict[str, Any]) -> dict[str, Any]:
    """A ReferenceError for a name that is a meta-tool, a tool written bare or a near miss of a global, with what to
    write instead; any other error as it is."""
    found = _UNDEFINED.fullmatch(str(error.get("message", "")))
    if error.get("name") != "ReferenceError" or found is None:
        return error
    name = found.group(1)
    if name in _FRONT_END_NAMES:
        hint = _FRONT_END_NAMES[name]
    elif "__" in name:  # the front end's `<server>__<tool>` form
        hint = f"a tool is called as `await tools.{name}(arguments)`"
    elif close := difflib.get_close_matches(name, SCRIPT_GLOBALS, n=1, cutoff=0.75):
        hint = f"did you mean {close[0]}? A script has {', '.join(SCRIPT_GLOBALS)}"
    else:
        return error
    return {**error, "message": f"{name} is not defined: {hint}"}


def script_error(kind: str, message: str, line: int | None = None, **extra: Any) -> dict[str, Any]:
    """The error of a run that did not finish."""
    return {"type": kind, "message": message, "line": line, **extra}


def failure(kind: str, message: str, line: int | None = None, **extra: Any) -> dict[str, Any]:
    """An outcome that is an error of this kind."""
    return {"ok": False, "error": script_error(kind, message, line, **extra)}


@dataclass
class CallRecord:
    """One call a script made, as the response lists it."""

    index: int
    kind: str
    name: str
    line: int | None
    status: str = "running"
    execution_id: str | None = None
    duration_ms: float = 0.0
    error: dict[str, Any] | None = None
    warnings: list[dict[str, str]] = field(default_factory=list)  # the result's screening (ExecutionResult)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ScriptRun:
    """The state of one run while it goes."""

    run_id: str
    caller: Caller
    approvals: dict[tuple[str, str], list[str]]
    calls: list[CallRecord] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    error: dict[str, Any] | None = None
    found: set[str] = field(default_factory=set)  # the tools its searches told of

    def halt(self, error: dict[str, Any]) -> None:
        """End the script with this error (the first one wins)."""
        if self.error is None:
            self.error = error
        self.stop.set()


def value_of(result: ExecutionResult) -> Any:
    """What a tool call returns inside a script: the structured content, else the text of the result."""
    structured = result.structured_content if result.structured_content is not None else result.left_out
    if structured is not None:
        return structured
    return "\n".join(str(b.get("text", "")) for b in result.content if b.get("type") == "text")
