// The code-mode prelude: it runs before the script, takes the host functions off the global object and keeps
// them in its closures, and gives the script `tools`, `search_tools` and `console`.
//
// The script may replace any global or prototype, so what the prelude uses after the script starts is its own
// copy taken here, objects it hands to JSON have no prototype (no inherited toJSON), and it loops with indexes
// (no Array iterator). What marks an error as a failed call is the prelude's own record of the error, never a
// property of it. V8's Error.prepareStackTrace (QuickJS-ng has it) is fixed to undefined: its call sites hand out
// every function on the stack, the prelude's own included; a call's place is read with the engine's own stack
// getter and frame limit.
//
// Frames of `__ts_` functions are the prelude's, a frame with no function (`at <input>:1:2`) a place in a text
// that JSON.parse or eval read: a call's line is the first frame of another function.
(() => {
  "use strict";
  const hostCall = globalThis.__ts_host_call, hostLog = globalThis.__ts_host_log;
  const hostDone = globalThis.__ts_host_done;
  delete globalThis.__ts_host_call; delete globalThis.__ts_host_log; delete globalThis.__ts_host_done;
  const { Promise, Error, TypeError, String, Number, Object, WeakMap, Proxy } = globalThis;
  const { stringify, parse } = JSON, apply = Reflect.apply, then = Promise.prototype.then;
  const reject = Promise.reject, define = Object.defineProperty, freeze = Object.freeze;
  const recall = WeakMap.prototype.get, remember = WeakMap.prototype.set;
  const slice = String.prototype.slice, exec = RegExp.prototype.exec, split = String.prototype.split;
  define(Error, "prepareStackTrace", { __proto__: null, value: undefined, writable: false, configurable: false });
  const stackOf = Object.getOwnPropertyDescriptor(Error.prototype, "stack").get;
  const { get: traceLimit, set: setTraceLimit } = Object.getOwnPropertyDescriptor(Error, "stackTraceLimit");
  // Where the script is now, whatever it did to Error.prototype.stack or Error.stackTraceLimit.
  function __ts_here() {
    const limit = apply(traceLimit, Error, []);
    apply(setTraceLimit, Error, [10]);
    try { return apply(stackOf, new Error(), []); } finally { apply(setTraceLimit, Error, [limit]); }
  }
  const cut = (text, n) => apply(slice, String(text), [0, n]);
  const refuse = (message) => apply(reject, Promise, [new TypeError(message)]);
  // The host gets a string or nothing: nothing then means the engine could not copy it (out of memory).
  const json = (value) => {
    const text = stringify(value);
    if (typeof text !== "string") throw new TypeError("it has no JSON form");
    return text;
  };
  const pending = Object.create(null);
  const where = (stack) => {
    const frames = apply(split, String(stack || ""), ["\n"]);
    for (let i = 0; i < frames.length; i++) {
      const m = apply(exec, /at (\S+) \(<input>:(\d+):(\d+)\)/, [frames[i]]);
      if (m && apply(slice, m[1], [0, 5]) !== "__ts_") {
        return { __proto__: null, line: Number(m[2]), column: Number(m[3]) };
      }
    }
    return { __proto__: null, line: null, column: null };
  };
  const calls = new WeakMap();  // a ToolError the prelude made: the call that failed and its line
  const field = (value) => ({ __proto__: null, value, writable: true, enumerable: true, configurable: true });
  class ToolError extends Error {
    constructor(info) {
      super(info.message);
      define(this, "name", field("ToolError"));
      define(this, "tool", field(info.tool));
      define(this, "status", field(info.status));
      define(this, "problem", field(info.problem));
      apply(remember, calls, [this, { __proto__: null, call: info.call, line: info.line }]);
    }
  }
  function __ts_request(kind, name, args) {
    let payload;
    try { payload = json(args === undefined ? {} : args); }
    catch (e) { return refuse(`the arguments of ${cut(name, 256)} are not JSON: ${e.message}`); }
    const line = where(__ts_here()).line;
    const id = hostCall(kind, stringify(name), line ?? 0, payload);
    if (typeof id !== "number") return refuse(String(id));
    const promise = new Promise((resolve, reject) => { pending[id] = { __proto__: null, resolve, reject, line }; });
    const label = kind === "tool" ? `tools.${cut(name, 256)}(...)` : "search_tools(...)";
    // The engine counts the opening line of the function the script is wrapped in: the script's line is one less.
    return unawaited(promise, line > 1 ? `${label} (line ${line - 1})` : label, label);
  }
  // A call's promise that says so when the script reads a field of it: without `await`, `hits.map(...)` was
  // "TypeError: not a function" and `(tools.x()).datetime` quietly undefined. What a promise has (then, catch,
  // symbols, Object.prototype's) still reads through, so `await`, Promise.all and String() work as before.
  const unawaited = (promise, said, label) => new Proxy(promise, {
    __proto__: null,
    get: function __ts_unawaited(target, key) {
      if (typeof key !== "string" || key in target) {
        const value = target[key];
        return typeof value === "function" ? (...args) => apply(value, target, args) : value;
      }
      throw new TypeError(`${said} returns a promise, not its result: write \`await ${label}\` to read .${cut(key, 64)}`);
    },
  });
  const settle = (id, ok, json) => {
    const waiter = pending[id];
    if (!waiter) return;
    delete pending[id];
    const value = parse(json);
    if (ok) waiter.resolve(value);
    else waiter.reject(new ToolError({ __proto__: null, ...value, line: waiter.line }));
  };
  const config = parse(globalThis.__ts_config);
  delete globalThis.__ts_config;
  const target = Object.create(null);
  for (const name of config.tools) target[name] = function __ts_tool(args) { return __ts_request("tool", name, args); };
  // Names outside the list still go to the service, which refuses them the way /execute does (and logs it).
  globalThis.tools = new Proxy(freeze(target), {
    get: (t, name) => typeof name !== "string" || name === "then" ? undefined
      : t[name] ?? function __ts_tool(args) { return __ts_request("tool", name, args); },
  });
  globalThis.search_tools = function __ts_search(query, k) {
    return __ts_request("search", "search_tools", { query, k });
  };
  const show = (v) => {
    if (typeof v === "string") return v;
    try { return stringify(v) ?? String(v); } catch { return String(v); }
  };
  const maxLogChars = config.max_log_chars;
  const log = (...args) => {
    let text = "";
    for (let i = 0; i < args.length; i++) text += (text ? " " : "") + show(args[i]);
    hostLog(stringify(cut(text, maxLogChars)));
  };
  globalThis.console = freeze({ log, info: log, warn: log, error: log, debug: log });
  const failure = (e) => {
    const made = apply(recall, calls, [e]);
    if (made) {
      return { __proto__: null, name: "ToolError", message: cut(e.message, 2000), line: made.line, column: null,
               call: made.call };
    }
    if (!(e instanceof Error)) {
      return { __proto__: null, name: "Error", message: cut(show(e), 2000), line: null, column: null };
    }
    return { __proto__: null, name: cut(e.name, 200), message: cut(e.message, 2000), ...where(e.stack), call: null };
  };
  const finish = (ok, value) => {
    let error;
    if (ok) {
      try { return hostDone(true, json(value === undefined ? null : value), value === undefined); }
      catch (e) {
        error = { __proto__: null, name: "TypeError", message: `the script's return value is not JSON: ${e.message}` };
      }
    }
    try { hostDone(false, stringify(error ?? failure(value))); } catch { hostDone(false, undefined); }
  };
  globalThis.__ts_run = function __ts_run(script) {
    delete globalThis.__ts_run;
    apply(then, script(), [(v) => finish(true, v), (e) => finish(false, e)]);
  };
  return settle;
})();
