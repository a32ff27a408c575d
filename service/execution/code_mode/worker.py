"""The code-mode child process: one QuickJS context running one script, talking JSON lines to the service.

Run as `python -I worker.py` by the sandbox (it imports nothing of Toolscout, so it starts in ~35 ms). The first
line on stdin configures the run; then the child writes `call`, `log` and finally one `done` message on stdout
and reads `settle` messages (a call's value or error) on stdin. The JavaScript context has no file, network,
process or timer API: what a script can reach is `tools`, `search_tools` and `console`.
"""

from __future__ import annotations

import itertools
import json
import re
import resource
import sys
from typing import Any

import quickjs

# Frames of these functions are the prelude's, so a call's line is the first frame after them.
PRELUDE = r"""
(() => {
  "use strict";
  const hostCall = globalThis.__ts_host_call, hostLog = globalThis.__ts_host_log;
  delete globalThis.__ts_host_call; delete globalThis.__ts_host_log;
  const pending = new Map();
  const where = (stack) => {
    for (const frame of String(stack || "").split("\n")) {
      const m = /at (\S+) \(<input>:(\d+):(\d+)\)/.exec(frame) || /at <input>:(\d+):(\d+)/.exec(frame);
      if (!m) continue;
      if (m.length === 4 && m[1].startsWith("__ts_")) continue;
      const [line, column] = m.length === 4 ? [m[2], m[3]] : [m[1], m[2]];
      return { line: Number(line), column: Number(column) };
    }
    return { line: null, column: null };
  };
  class ToolError extends Error {
    constructor(info) {
      super(info.message);
      this.name = "ToolError";
      Object.assign(this, { tool: info.tool, status: info.status, problem: info.problem, __ts_call: info.call });
      this.__ts_line = info.line;
    }
  }
  function __ts_request(kind, name, args) {
    let payload;
    try { payload = JSON.stringify(args === undefined ? {} : args); }
    catch (e) { return Promise.reject(new TypeError(`the arguments of ${name} are not JSON: ${e.message}`)); }
    const line = where(new Error().stack).line;
    const id = hostCall(kind, name, payload, line ?? 0);
    return new Promise((resolve, reject) => pending.set(id, { resolve, reject, line }));
  }
  globalThis.__ts_settle = (id, ok, json) => {
    const waiter = pending.get(id);
    if (!waiter) return;
    pending.delete(id);
    const value = JSON.parse(json);
    if (ok) waiter.resolve(value); else waiter.reject(new ToolError({ ...value, line: waiter.line }));
  };
  const allowed = new Set(JSON.parse(globalThis.__ts_tool_names));
  delete globalThis.__ts_tool_names;
  const target = Object.create(null);
  for (const name of allowed) target[name] = function __ts_tool(args) { return __ts_request("tool", name, args); };
  // Names outside the list still go to the service, which refuses them the way /execute does (and logs it).
  globalThis.tools = new Proxy(Object.freeze(target), {
    get: (t, name) => typeof name !== "string" || name === "then" ? undefined
      : t[name] ?? function __ts_tool(args) { return __ts_request("tool", name, args); },
  });
  globalThis.search_tools = function __ts_search(query, k) {
    return __ts_request("search", "search_tools", { query, k });
  };
  const show = (v) => {
    if (typeof v === "string") return v;
    try { return JSON.stringify(v) ?? String(v); } catch { return String(v); }
  };
  const log = (...args) => hostLog(args.map(show).join(" "));
  globalThis.console = Object.freeze({ log, info: log, warn: log, error: log, debug: log });
  globalThis.__ts_finish = function __ts_finish(ok, value) {
    if (ok) {
      try { globalThis.__ts_outcome = JSON.stringify({ ok: true, value: value === undefined ? null : value }); return; }
      catch (e) { value = new TypeError(`the script's return value is not JSON: ${e.message}`); }
    }
    const e = value instanceof Error ? value : new Error(show(value));
    const at = e.__ts_line ? { line: e.__ts_line, column: null } : where(e.stack);
    globalThis.__ts_outcome = JSON.stringify({ ok: false, error: {
      name: e.name, message: String(e.message), line: at.line, column: at.column, call: e.__ts_call ?? null } });
  };
})();
"""
# The script runs inside an async function that starts on its first line, so error lines are the script's own.
OPENING = "(async function __script__() { "
CLOSING = (
    "\n})().then(function __ts_ok(v) { __ts_finish(true, v); }, function __ts_fail(e) { __ts_finish(false, e); });"
)
_LOCATION = re.compile(r"<input>:(\d+):(\d+)")


class Child:
    """One run: the context, the calls it waits for and the bounded console."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.ids = itertools.count(1)
        self.outstanding: set[int] = set()
        self.log_lines = 0
        self.context = quickjs.Context()
        self.context.set_memory_limit(int(config["memory_bytes"]))
        self.context.add_callable("__ts_host_call", self.host_call)
        self.context.add_callable("__ts_host_log", self.host_log)
        self.context.set("__ts_tool_names", json.dumps(config["tools"]))

    def host_call(self, kind: str, name: str, payload: str, line: int) -> int:
        call_id = next(self.ids)
        self.outstanding.add(call_id)
        send(
            {
                "op": "call",
                "id": call_id,
                "kind": kind,
                "name": name,
                "arguments": json.loads(payload),
                "line": int(line) or None,
            }
        )
        return call_id

    def host_log(self, text: str) -> None:
        self.log_lines += 1
        if self.log_lines <= int(self.config["max_log_lines"]):
            send({"op": "log", "text": str(text)[: int(self.config["max_log_chars"])]})

    def run(self, script: str) -> dict[str, Any]:
        """The script's outcome: {ok, value} or {ok: false, error}."""
        try:
            self.context.eval(PRELUDE)
            self.context.eval(OPENING + script + CLOSING)
            while True:
                while self.context.execute_pending_job():
                    pass
                outcome = self.context.get("__ts_outcome")
                if outcome is not None:
                    return self._checked(json.loads(outcome))
                if not self.outstanding:
                    return failure("script_error", "the script awaits a promise that never settles")
                message = sys.stdin.readline()
                if not message:
                    return failure("cancelled", "the service closed the run")
                settle = json.loads(message)
                self.outstanding.discard(settle["id"])
                self.context.get("__ts_settle")(settle["id"], bool(settle["ok"]), json.dumps(settle["value"]))
        except quickjs.JSException as exc:
            return self._from_exception(str(exc))

    def _checked(self, outcome: dict[str, Any]) -> dict[str, Any]:
        error = outcome.get("error")
        if error and error.get("line") == 1 and error.get("column"):
            error["column"] = max(1, error["column"] - len(OPENING))
        if error and error.get("message") == "out of memory":
            error["type"] = "memory_limit"
        elif error:
            error["type"] = "tool_error" if error.get("call") else "script_error"
        return outcome

    def _from_exception(self, text: str) -> dict[str, Any]:
        head = text.splitlines()[0] if text else "the engine failed"
        found = _LOCATION.search(text)
        line, column = (int(found.group(1)), int(found.group(2))) if found else (None, None)
        if line == 1 and column is not None:
            column = max(1, column - len(OPENING))
        if "out of memory" in head:
            return failure("memory_limit", head, line, column)
        if "interrupted" in head:
            return failure("timeout", "the script used up its CPU time", line, column)
        return failure("script_error", head, line, column)


def failure(
    kind: str, message: str, line: int | None = None, column: int | None = None, **extra: Any
) -> dict[str, Any]:
    """An outcome that is an error of this kind."""
    return {"ok": False, "error": {"type": kind, "message": message, "line": line, "column": column, **extra}}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n")
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


def main() -> None:
    config = json.loads(sys.stdin.readline())
    # A backstop if the service stops watching: the service kills the child at the wall-clock budget.
    cpu = int(config["cpu_seconds"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    child = Child(config)
    baseline = peak_rss()
    outcome = child.run(config["script"])
    outcome["memory_bytes"] = max(0, peak_rss() - baseline)
    outcome["log_lines"] = child.log_lines
    send({"op": "done", "outcome": outcome})


if __name__ == "__main__":
    main()
