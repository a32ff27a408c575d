/* Approvals (pending ones with grant / deny) and, for admins, the tools held for review, API keys and callers. */
"use strict";
(function (TS) {
  const { h, get, post, api, qs, fmt, table, card, problemBox } = TS;

  function args(a) {
    return a.arguments ? h("pre", { class: "json small" }, fmt.json(a.arguments))
      : h("span", { class: "muted", title: "raw arguments are not kept; the approval binds their SHA-256" }, "digest " + a.arguments_digest.slice(0, 12) + "…");
  }

  async function renderApprovals(root) {
    const [pending, recent] = await Promise.all([get("/approvals" + qs({ status: "pending" })), get("/approvals" + qs({ limit: 30 }))]);
    const approver = TS.me.approver;
    const note = h("div", { id: "approval-message" });
    async function act(a, verb) {
      try {
        const r = verb === "grant" ? await post("/approvals", { approval_id: a.id }) : await post("/approvals/" + a.id + "/deny");
        const next = r.status === "granted" ? ": " + a.caller + " may now repeat the call of " + a.tool + " with approval_id " + r.id + "."
          : ": the call of " + a.tool + " by " + a.caller + " stays refused.";
        await TS.route(h("p", { class: "ok" }, "Approval " + r.id + " is " + r.status + next));
      } catch (err) { TS.fill(note, problemBox(err)); }
    }
    root.append(h("h1", {}, "Approvals"), note,
      card("Pending (" + pending.approvals.length + ")", table([
        { title: "requested", cell: (a) => fmt.time(a.requested_at) }, { title: "caller", cell: (a) => a.caller },
        { title: "tool", cell: (a) => a.tool }, { title: "arguments", cell: args }, { title: "expires", cell: (a) => fmt.time(a.expires_at) },
        { title: "", cell: (a) => (approver ? [h("button", { type: "button", class: "grant", onclick: () => act(a, "grant") }, "Grant"), " ",
          h("button", { type: "button", class: "deny secondary", onclick: () => act(a, "deny") }, "Deny")] : h("span", { class: "muted" }, "an approver decides")) },
      ], pending.approvals, { id: "pending-table", rowAttrs: (a) => ({ "data-id": a.id }), empty: "No call waits for an approval." })),
      card("Recent", table([
        { title: "requested", cell: (a) => fmt.time(a.requested_at) }, { title: "caller", cell: (a) => a.caller },
        { title: "tool", cell: (a) => a.tool }, { title: "status", cell: (a) => h("span", { class: "badge" }, a.status) },
        { title: "by", cell: (a) => a.granted_by || "" }, { title: "used", cell: (a) => fmt.time(a.used_at) },
      ], recent.approvals, { id: "recent-approvals" })));
  }

  function heldDetail(t) {
    const held = t.held || {};
    const previous = held.previous;
    return h("div", { class: "tool-detail" },
      h("p", {}, h("strong", {}, "Why: "), held.reason || ""),
      held.matched ? h("p", {}, "matched in ", h("code", {}, (held.field || "") + (held.at || "")), ": ", h("code", { class: "matched" }, held.matched)) : null,
      h("h4", {}, previous ? "Description now (agents were given the previous one)" : "Description"), h("p", { class: "held-description" }, t.description),
      previous ? [h("h4", {}, "Previous description"), h("p", {}, previous.description || "")] : null,
      held.changes ? [h("h4", {}, "What changed"), h("pre", { class: "json small" }, fmt.json(held.changes))] : null,
      h("h4", {}, "Input schema"), h("pre", { class: "json small" }, fmt.json(t.input_schema || {})));
  }

  async function renderHeld(root) {
    const page = await get("/tools" + qs({ held: true, limit: 1000 }));
    const note = h("div", { id: "held-message" });
    async function approve(t) {
      if (!window.confirm("Approve " + t.name + "? Agents will be given its text and may call it.")) return;
      try {
        await post("/tools/" + encodeURIComponent(t.name) + "/approve");
        await TS.route(h("p", { class: "ok" }, t.name + " is approved: it is searchable and callable again."));
      } catch (err) { TS.fill(note, problemBox(err)); }
    }
    root.append(h("h1", {}, "Held tools"), note,
      h("p", { class: "muted" }, "Tools whose text bears a poisoning signature, or whose definition an upstream changed since it was trusted, are held: no search, listing or call reaches them until an admin approves them."),
      card("Held for review (" + page.total + ")", table([
        { title: "tool", cell: (t) => h("code", {}, t.name) }, { title: "held", cell: (t) => fmt.time((t.held || {}).held_at) },
        { title: "review", cell: heldDetail },
        { title: "", cell: (t) => h("button", { type: "button", class: "grant", onclick: () => approve(t) }, "Approve") },
      ], page.tools, { id: "held-table", rowAttrs: (t) => ({ "data-name": t.name }), empty: "No tool is held for review." })),
      heldServers(page.held_servers || [], note));
  }

  /* A server's changed introduction (instructions, title, description) ranks nothing until approved. */
  function heldServers(servers, note) {
    async function approve(s) {
      if (!window.confirm("Approve the new info of " + s.server + "? It will rank its tools.")) return;
      try {
        await post("/servers/" + encodeURIComponent(s.server) + "/info/approve");
        await TS.route(h("p", { class: "ok" }, s.server + "'s info is approved: it ranks its tools from now on."));
      } catch (err) { TS.fill(note, problemBox(err)); }
    }
    const changed = (s) => h("div", { class: "tool-detail" }, h("p", {}, h("strong", {}, "Why: "), s.reason || ""),
      (s.changes || []).map((f) => [h("h4", {}, f + " now"), h("p", { class: "held-info" }, String((s.info || {})[f] ?? "")),
        h("h4", {}, f + " before"), h("p", {}, String((s.previous || {})[f] ?? ""))]));
    return card("Server info held out of ranking (" + servers.length + ")", table([
      { title: "server", cell: (s) => h("code", {}, s.server) }, { title: "held", cell: (s) => fmt.time(s.held_at) },
      { title: "review", cell: changed },
      { title: "", cell: (s) => h("button", { type: "button", class: "grant", onclick: () => approve(s) }, "Approve") },
    ], servers, { id: "held-servers", rowAttrs: (s) => ({ "data-server": s.server }), empty: "No server's info is held." }));
  }

  async function renderKeys(root) {
    const since = TS.iso(TS.bucketStarts(30, "day")[0]);
    const [keys, callers] = await Promise.all([get("/keys"), get("/analytics/callers" + qs({ since, limit: 100 }))]);
    const out = h("div", { id: "key-message", role: "status" });
    const caller = h("input", { id: "new-caller", placeholder: "caller id", required: true });
    const roles = h("input", { id: "new-roles", placeholder: "roles, comma separated (admin, approver, metrics …)" });
    const listed = h("div", {});
    const showKeys = (list) => TS.fill(listed, table([
      { title: "prefix", cell: (k) => h("code", {}, k.prefix) }, { title: "caller", cell: (k) => k.caller },
      { title: "roles", cell: (k) => k.roles.join(", ") }, { title: "created", cell: (k) => fmt.time(k.created_at) },
      { title: "", cell: (k) => h("button", { type: "button", class: "secondary", onclick: () => revoke(k) }, "Revoke") },
    ], list, { id: "keys-table", rowAttrs: (k) => ({ "data-caller": k.caller, "data-id": k.id }), empty: "No key is active: create one above." }));
    /* After a change the table is read again, so a key just created can be revoked without reloading the page,
       and the message above it says what happened (the secret stays on screen until the next action). */
    async function refresh(message) {
      TS.fill(out, message);
      try { showKeys((await get("/keys")).keys); } catch (err) { out.append(problemBox(err)); }
    }
    async function create(ev) {
      ev.preventDefault();
      try {
        const r = await post("/keys", { caller: caller.value, roles: roles.value.split(",").map((x) => x.trim()).filter(Boolean) });
        caller.value = ""; roles.value = "";
        await refresh(h("div", { class: "secret" }, "Key for ", h("strong", {}, r.caller), " (roles: " + (r.roles.join(", ") || "none") + "), shown once: ",
          h("code", { id: "new-key" }, r.key), h("div", { class: "muted" }, "Store it now: only its hash is kept.")));
      } catch (err) { TS.fill(out, problemBox(err)); }
    }
    async function revoke(k) {
      if (!window.confirm("Revoke key " + k.prefix + " of " + k.caller + "?")) return;
      try {
        await api("DELETE", "/keys/" + k.id);
        await refresh(h("p", { class: "ok" }, "Key " + k.prefix + "… of " + k.caller + " is revoked: every request with it is refused from now on."));
      } catch (err) { TS.fill(out, problemBox(err)); }
    }
    showKeys(keys.keys);
    root.append(h("h1", {}, "Keys & callers"),
      card("Create a key", h("form", { id: "key-form", class: "inline", onsubmit: create }, caller, roles, h("button", { type: "submit" }, "Create")), out),
      card("API keys", listed),
      card("Callers (last 30 days)", table([
        { title: "caller", cell: (c) => c.caller }, { title: "calls", num: true, cell: (c) => fmt.int(c.calls) },
        { title: "success", num: true, cell: (c) => fmt.pct(c.success_rate) }, { title: "tools", num: true, cell: (c) => fmt.int(c.tools) },
        { title: "searches", num: true, cell: (c) => fmt.int(c.searches) }, { title: "last active (UTC day)", cell: (c) => fmt.day(c.last_active_day) },
      ], callers.callers, { id: "callers-table", rowAttrs: (c) => ({ "data-caller": c.caller }), empty: "No caller made a call or a search in these 30 days." })));
  }

  TS.pages.approvals = { title: "Approvals", render: renderApprovals };
  TS.pages.held = { title: "Held tools", render: renderHeld, admin: true };
  TS.pages.keys = { title: "Keys & callers", render: renderKeys, admin: true };
})(window.TS);
