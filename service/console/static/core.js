/* Shared helpers of the console: DOM building (text only, never innerHTML), the API client, formatting. */
"use strict";
window.TS = (function () {
  /* h("div", {class: "x"}, "text", child) -> element; strings become text nodes, so data is never HTML. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
      else if (name === "dataset") Object.assign(el.dataset, value);
      else el.setAttribute(name, value === true ? "" : String(value));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  class Problem extends Error {
    constructor(status, body) {
      super((body && (body.detail || body.title)) || "HTTP " + status);
      this.status = status;
      this.body = body || {};
    }
  }

  /* The console's requests go to /console/api, where its session cookie (HttpOnly: no script reads it) is sent;
     a REST path such as "/keys" becomes "/console/api/keys". The header tells the server a request is the
     console's own: a cookie on a request without it (a cross-site form) is refused. */
  const API = "/console/api";
  const url = (path) => (path.startsWith("/console/") ? path : API + path);

  async function api(method, path, body) {
    const headers = { Accept: "application/json", "X-Toolscout-Console": "1" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(url(path), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin", cache: "no-store",
    });
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text }; }
    if (!response.ok) {
      if (response.status === 401 && window.TS.onUnauthorized) window.TS.onUnauthorized();
      throw new Problem(response.status, data);
    }
    return data;
  }

  /* Sign-in exchanges the key once for the session cookie; the key is kept nowhere in the browser. */
  const session = {
    open: (key) => api("POST", API + "/session", { key }),
    close: () => api("DELETE", API + "/session"),
  };

  const get = (path) => api("GET", path);
  const post = (path, body) => api("POST", path, body === undefined ? {} : body);

  function qs(params) {
    const parts = [];
    for (const [k, v] of Object.entries(params)) {
      if (v !== null && v !== undefined && v !== "") parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
    }
    return parts.length ? "?" + parts.join("&") : "";
  }

  const fmt = {
    int: (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US")),
    pct: (x) => (x === null || x === undefined || isNaN(x) ? "–" : (100 * x).toFixed(1) + "%"),
    ms: (x) => (x === null || x === undefined ? "–" : Number(x) < 10 ? Number(x).toFixed(2) + " ms" : Math.round(x) + " ms"),
    num: (x, d) => (x === null || x === undefined ? "–" : Number(x).toFixed(d === undefined ? 3 : d)),
    time: (iso) => (iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", "Z") : "–"),
    day: (iso) => (iso ? iso.slice(0, 10) : "–"),  // a UTC day, not its midnight as a time
    json: (v) => JSON.stringify(v, null, 2),
    // "1 tool", "2 tools" (service/errors.py counted, for the console)
    count: (n, noun, plural) => fmt.int(n) + " " + (Number(n) === 1 ? noun : plural || noun + "s"),
  };

  function table(columns, rows, opts) {
    const o = opts || {};
    const head = h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.title)));
    const body = rows.map((row) =>
      h("tr", o.rowAttrs ? o.rowAttrs(row) : {}, columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(row))))
    );
    if (!rows.length) body.push(h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, o.empty || "Nothing yet")));
    return h("table", { class: "grid", id: o.id || null }, h("thead", {}, head), h("tbody", {}, body));
  }

  function problemBox(err) {
    const body = err.body || {};
    return h("div", { class: "problem", role: "alert" },
      h("strong", {}, (err.status ? err.status + " " : "") + (body.title || "Error")),
      h("div", {}, body.detail || err.message),
      (body.errors || []).length ? h("ul", {}, body.errors.map((e) => h("li", {}, h("code", {}, e.pointer || "/"), " ", e.reason))) : null);
  }

  function card(title, ...children) {
    return h("section", { class: "card" }, title ? h("h2", {}, title) : null, children);
  }

  /* The starts (ms) of the last `count` UTC hours or days, the current one last. A window is asked of the API
     from its first bucket's start (iso): asked from "24 hours ago", the API counts that hour's whole bucket,
     a 25th the chart had no column for, so the tiles and the tables counted calls the chart did not show. */
  function bucketStarts(count, bucket) {
    const step = bucket === "hour" ? 3600e3 : 86400e3;
    const last = Date.now() - (Date.now() % step);  // UTC hours and days are whole steps since the epoch
    return Array.from({ length: count }, (_, i) => last - (count - 1 - i) * step);
  }

  /* What an empty catalog means for who is reading: an admin sees every tool, so none are registered; anyone
     else may see none (their roles allow none), and "Nothing yet" told neither what to do. */
  function noTools() {
    const me = window.TS.me || {};
    if (me.admin) return "The catalog has no tool: add MCP servers (TOOLSCOUT_EXECUTION__SERVERS_FILE) or register a catalog (toolscout index FILE).";
    return "No tool is open to your roles (" + ((me.roles || []).join(", ") || "none") + "): an admin allows tools to roles in the permissions file.";
  }

  const iso = (ms) => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");

  /* Replace an element's children (arrays flattened, null and false skipped). */
  function fill(el, ...children) {
    el.replaceChildren();
    return append(el, children);
  }

  return { h, append, fill, api, get, post, qs, fmt, table, problemBox, card, session, Problem, bucketStarts, iso, noTools, pages: {}, me: null };
})();
