"""The code-mode child process: one QuickJS context running one script, talking JSON lines to the service.

Run as `python -I worker.py` by the sandbox (it imports nothing of Toolscout, so it starts in ~35 ms). The first
line on stdin configures the run; then the child writes `call`, `log` and finally one `done` message on stdout
and reads `settle` messages (a call's value or error) on stdin. The JavaScript context has no file, network,
process or timer API: what a script can reach is `tools`, `search_tools` and `console`.

The script may replace any global, built-ins included, so the prelude keeps its own copies of what it uses and
hands the host JSON text only; the host checks what it receives and never raises into the engine (an exception
in a host function would end the process, not throw in JavaScript).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import resource
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import quickjs

MAX_NAME_CHARS = 256  # a tool name, as POST /execute takes it
MAX_DEPTH = 100  # nesting of a value that crosses to the service (its JSON encoders stop near 255)
MAX_ERROR_CHARS = 2000

PRELUDE = Path(__file__).with_name("prelude.js").read_text(encoding="utf-8")
# The script runs in an async function whose opening has a line to itself: the script's line n is the engine's
# n + 1, columns unshifted (QuickJS counts some columns of its first line from 0); a // comment ends at CLOSING.
HEAD = "async function __script__() {\n"
OPENING = f"__ts_run({HEAD}"
CLOSING = "\n});"
# Whether the script is exactly the body of that function (a `});` of its own would end it and run the rest
# outside), asked of a context of its own before anything of the script runs; nothing of the script runs here
# either. The script as the body of a declaration, which `throw` hands out (a declaration is hoisted): the body
# is the script when the function's source text is the whole text. When it is not, the engine's own text, with
# `throw 1` first: a syntax error there is the run's, as the engine words it. True, false, or the stack of the
# error that names where the script went on outside the function.
BODY_CHECK = r"""
(() => {
  const indirect = eval, apply = Reflect.apply, source = Function.prototype.toString;
  return (head, script, opening, closing) => {
    const whole = `${head}${script}\n}`;
    let outside = false;
    try { indirect(`throw __script__;${whole}`); } catch (e) {
      if (typeof e === "function" && apply(source, e, []) === whole) return true;
      if (typeof e?.stack === "string") outside = e.stack;
    }
    try { indirect(`throw 1;${opening}${script}${closing}`); } catch (e) { if (e !== 1) throw e; }
    return outside;
  };
})()
"""
OUTSIDE = (
    "the script ends the async function it runs in before its own end (a `}` of its own closes it): "
    "a script is the body of one async function, and `return` gives the result"
)
_LOCATION = re.compile(r"<input>:(\d+):(\d+)")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
OUT_OF_MEMORY = "the engine process ran out of memory"
ENDED_EARLY = "SyntaxError: the script ends with an expression, bracket or brace left open, or one closed too many"
HEAP_EXHAUSTED = "the script ran out of memory"
NEVER_SETTLES = "the script awaits a promise that never settles"


class Refused(Exception):
    """A value the script hands the host cannot cross to the service; the message says why."""


class Child:
    """One run: the context, the calls it waits for and the bounded console."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.ids = itertools.count(1)
        self.outstanding: set[int] = set()
        self.log_lines = 0
        self.outcome: dict[str, Any] | None = None
        self.script = str(config["script"])
        self.fault: dict[str, Any] | None = None  # the outcome when a host function failed
        self.context = quickjs.Context()
        self.context.set_memory_limit(int(config["memory_bytes"]))
        self.context.add_callable("__ts_host_call", self.guarded(self.host_call))
        self.context.add_callable("__ts_host_log", self.guarded(self.host_log))
        self.context.add_callable("__ts_host_done", self.guarded(self.host_done))
        self.context.set(
            "__ts_config", json.dumps({"tools": config["tools"], "max_log_chars": int(config["max_log_chars"])})
        )

    def guarded(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """The host function, ending the run instead of raising into the engine (which would end the process)."""

        def call(*args: Any) -> Any:
            try:
                return function(*args)
            except Exception as exc:  # noqa: BLE001 - the run ends with an engine error, the cause goes to stderr
                traceback.print_exc()
                self.fault = (
                    failure("memory_limit", OUT_OF_MEMORY)
                    if exhausted(exc)
                    else failure("engine_error", "the engine could not read what the script handed it")
                )
                return None

        return call

    def host_call(self, kind: Any, name_json: Any, line: Any, payload: Any) -> int | str:
        """The call's id, or why it is refused (the prelude throws that as a TypeError at the call)."""
        refused = f"a tool name has at most {MAX_NAME_CHARS} characters"
        if kind not in ("tool", "search") or not isinstance(name_json, str) or len(name_json) > 8 * MAX_NAME_CHARS:
            return refused
        copied(payload)
        name = json.loads(name_json)
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
            return refused
        try:
            arguments = readable(payload, int(self.config["max_value_chars"]))
        except Refused as exc:
            return f"the arguments of {name} are {exc}"
        if not isinstance(arguments, dict):
            return f"the arguments of {name} must be an object, like {{text: 'hi'}}"
        call_id = next(self.ids)
        self.outstanding.add(call_id)
        line = place(self.script, line_of(line), None)[0]
        send({"op": "call", "id": call_id, "kind": kind, "name": name, "arguments": arguments, "line": line})
        return call_id

    def host_log(self, text: Any) -> None:
        self.log_lines += 1
        if self.log_lines <= int(self.config["max_log_lines"]):
            line = json.loads(text) if isinstance(text, str) else ""
            send({"op": "log", "text": str(line)[: int(self.config["max_log_chars"])]})

    def host_done(self, ok: Any, payload: Any, undefined: Any = False) -> None:
        if self.outcome is not None:
            return
        if ok is True:
            copied(payload)
            try:
                value = readable(payload, int(self.config["max_value_chars"]))
                self.outcome = {"ok": True, "value": value, "undefined": undefined is True}
            except Refused as exc:
                self.outcome = failure("script_error", f"the script's return value is {exc}")
            return
        try:
            error = readable(payload, 4 * MAX_ERROR_CHARS)
        except Refused:
            error = None
        self.outcome = thrown(error if isinstance(error, dict) else {}, self.script)

    def run(self) -> dict[str, Any]:
        """The script's outcome: {ok, value} or {ok: false, error}."""
        try:
            refused = self.outside()
            if refused is not None:
                return refused
            settle = self.context.eval(PRELUDE)
            self.context.eval(OPENING + self.script + CLOSING)
            while True:
                while self.fault is None and self.outcome is None and self.context.execute_pending_job():
                    pass
                if self.fault is not None:
                    return self.fault
                if self.outcome is not None:
                    return self.outcome
                if not self.outstanding:
                    return failure("script_error", NEVER_SETTLES)
                message = sys.stdin.readline()
                if not message:
                    return failure("cancelled", "the service closed the run")
                reply = json.loads(message)
                self.outstanding.discard(reply["id"])
                settle(reply["id"], bool(reply["ok"]), json.dumps(reply["value"]))
        except quickjs.JSException as exc:
            return self._from_exception(str(exc))

    def outside(self) -> dict[str, Any] | None:
        """None when the script is exactly the body of one async function, else the outcome refusing it; a
        syntax error raises the engine's JSException."""
        check = quickjs.Context()
        check.set_memory_limit(int(self.config["memory_bytes"]))
        verdict = check.eval(BODY_CHECK)(HEAD, self.script, OPENING, CLOSING)
        if verdict is True:
            return None
        return failure("script_error", OUTSIDE, *self._located(verdict if isinstance(verdict, str) else ""))

    def _located(self, text: str) -> tuple[int | None, int | None]:
        """The script's own line and column of the first place in the engine's text that this names."""
        found = _LOCATION.search(text)
        return place(self.script, *((int(found.group(1)), int(found.group(2))) if found else (None, None)))

    def _from_exception(self, text: str) -> dict[str, Any]:
        head = text.splitlines()[0][:MAX_ERROR_CHARS] if text else "the engine failed"
        line, column = self._located(text)
        if "out of memory" in head:
            return failure("memory_limit", head, line, column)
        if "interrupted" in head:
            return failure("timeout", "the script used up its CPU time", line, column)
        # Found in CLOSING, the engine quoted its `}` or `)`, which the script does not hold.
        found = _LOCATION.search(text)
        if head.startswith("SyntaxError") and found and int(found.group(1)) - 2 > self.script.count("\n"):
            head = ENDED_EARLY
        return failure("script_error", head, line, column)


def place(script: str, line: int | None, column: int | None) -> tuple[int | None, int | None]:
    """The script's own line and column of a place in OPENING + script + CLOSING. In the closing, the script ended
    too early (`return 1 +`): the end of its last line that is not blank. The opening has no place of the script."""
    if line is not None and line - 1 > script.count("\n") + 1:
        text = script.rstrip()
        return text.count("\n") + 1, len(text) - text.rfind("\n")
    return (line - 1, column) if line is not None and line > 1 else (None, None)


def thrown(error: dict[str, Any], script: str) -> dict[str, Any]:
    """The outcome of an error the script threw, from the fields the prelude read off it."""
    message = str(error.get("message", "the script threw a value that cannot be read"))[:MAX_ERROR_CHARS]
    line, column = place(script, line_of(error.get("line")), line_of(error.get("column")))
    call = error.get("call") if isinstance(error.get("call"), int) else None
    kind = "memory_limit" if "out of memory" in message else "tool_error" if call else "script_error"
    name = str(error.get("name", "Error"))[:200]
    return {
        "ok": False,
        "error": {"name": name, "message": message, "line": line, "column": column, "call": call, "type": kind},
    }


def copied(text: Any) -> None:
    """The prelude hands JSON text only: anything else is a string the engine could not copy into Python."""
    if not isinstance(text, str):
        raise MemoryError("the engine could not copy a value into Python")


def exhausted(exc: BaseException) -> bool:
    """Whether the process ran out of memory: a MemoryError, itself or as the cause of what was raised (a value
    the engine could not copy into Python surfaces as a SystemError caused by one)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def readable(text: Any, limit: int) -> Any:
    """The value of JSON text from the engine; Refused says why it cannot cross to the service."""
    if not isinstance(text, str):
        raise Refused("not JSON")
    if len(text) > limit:
        raise Refused(f"{len(text)} characters of JSON, over the limit of {limit} (code_mode.max_value_chars)")
    nested = Refused(f"nested more than {MAX_DEPTH} levels deep")
    try:
        value = json.loads(text)
    except RecursionError:
        raise nested from None
    if depth(value) > MAX_DEPTH:
        raise nested
    return value


def depth(value: Any) -> int:
    """How many arrays and objects deep the value goes (at most one more than MAX_DEPTH is looked at)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list) and level > deepest:
            deepest = level
            if deepest > MAX_DEPTH:
                break
        if isinstance(item, dict):
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, level + 1) for child in item)
    return deepest


def line_of(value: Any) -> int | None:
    """A line or column number from the engine, None when it is not one."""
    return int(value) if isinstance(value, int | float) and 1 <= value <= 10_000_000 else None


def failure(
    kind: str, message: str, line: int | None = None, column: int | None = None, **extra: Any
) -> dict[str, Any]:
    """An outcome that is an error of this kind."""
    return {"ok": False, "error": {"type": kind, "message": message, "line": line, "column": column, **extra}}


def send(message: dict[str, Any]) -> None:
    """Write one message; a lone surrogate (valid in a JavaScript string, not in UTF-8) becomes U+FFFD."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    sys.stdout.write(_SURROGATE.sub("\ufffd", text) + "\n")
    sys.stdout.flush()


def peak_rss() -> int:
    """The most memory this process image has held, in bytes (VmHWM: ru_maxrss would include the parent's
    memory from before the exec)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def heap_exhausted(outcome: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether a run that ended in a thrown null or a promise that never settles filled its heap: when QuickJS
    cannot make its out-of-memory error it throws null, and after an await that exception leaves the job (the
    binding does not say) instead of rejecting the script. The heap, freed by then, shows in the process's peak."""
    error = outcome.get("error") if not outcome.get("ok") else None
    if not isinstance(error, dict) or error.get("type") != "script_error" or error.get("call") is not None:
        return False
    thrown_null = error.get("name") == "Error" and error.get("message") == "null" and error.get("line") is None
    if not thrown_null and error.get("message") != NEVER_SETTLES:
        return False
    return int(outcome.get("memory_bytes", 0)) >= 0.9 * int(config["memory_bytes"])


def with_limits(outcome: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A memory_limit outcome says which limits the run had: QuickJS's heap, or the whole process (what crosses
    into Python is outside the heap), whichever ran out."""
    error = outcome.get("error")
    if not outcome.get("ok") and isinstance(error, dict) and error.get("type") == "memory_limit":
        heap, process = int(config["memory_bytes"]) >> 20, int(config["process_memory_bytes"]) >> 20
        error["message"] = (
            f"{error['message']} (the script's heap holds at most {heap} MiB, code_mode.memory_mib; "
            f"the engine process {process} MiB, code_mode.process_memory_mib)"
        )
    return outcome


def main() -> None:
    config = json.loads(sys.stdin.readline())
    # Behind the service's own work: a script's busy loop takes the CPU the service's requests leave, not theirs.
    os.nice(int(config.get("niceness", 0)))
    # A backstop if the service stops watching: the service kills the child at the wall-clock budget.
    cpu = int(config["cpu_seconds"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    # QuickJS's heap limit counts the engine's own allocations only: what crosses into Python (a script's value,
    # copied before its size is checked) and the interpreter grow outside it. This bounds the whole process, set
    # once the interpreter and the engine are loaded; hard = soft, so nothing here can raise it again.
    address_space = int(config["process_memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    baseline = peak_rss()
    try:
        child = Child(config)
        outcome = child.run() | {"log_lines": child.log_lines}
    except Exception as exc:  # noqa: BLE001 - the caller gets the kind of failure, the service's log the traceback
        traceback.print_exc()
        outcome = (
            failure("memory_limit", OUT_OF_MEMORY) if exhausted(exc) else failure("engine_error", "the engine failed")
        )
    outcome["memory_bytes"] = max(0, peak_rss() - baseline)
    if heap_exhausted(outcome, config):
        outcome["error"] = failure("memory_limit", HEAP_EXHAUSTED)["error"]
    try:
        send({"op": "done", "outcome": with_limits(outcome, config)})
    except MemoryError:  # writing the value out took the memory: the error alone is small
        send({"op": "done", "outcome": with_limits(failure("memory_limit", OUT_OF_MEMORY), config)})


if __name__ == "__main__":
    main()
