/* Catalog: servers with their health, tools per server with schemas and annotations, search by name. */
"use strict";
(function (TS) {
  const { h, get, qs, fmt, table, card } = TS;

  async function allTools() {
    const tools = [];
    for (let offset = 0; ; offset += 1000) {
      const page = await get("/tools" + qs({ limit: 1000, offset }));
      tools.push(...page.tools);
      if (tools.length >= page.total || !page.tools.length) return tools;
    }
  }

  function stateBadge(state) {
    const kind = state === "ready" ? "good" : state === "catalog" ? "" : state === "backoff" || state === "stopped" ? "bad" : "warn";
    return h("span", { class: "badge " + kind, "data-state": state }, state);
  }

  function toolDetail(tool) {
    return h("div", { class: "tool-detail", id: "tool-detail", "data-name": tool.name },
      h("h3", {}, tool.name), h("p", {}, tool.description),
      tool.tags.length ? h("p", {}, "tags: ", tool.tags.map((t) => h("span", { class: "badge" }, t))) : null,
      h("h4", {}, "Annotations"), h("pre", { class: "json" }, fmt.json(tool.annotations || {})),
      h("h4", {}, "Input schema"), h("pre", { class: "json" }, fmt.json(tool.input_schema || {})),
      h("a", { href: "#/playground?q=" + encodeURIComponent(tool.name) }, "Search for it in the playground"));
  }

  async function render(root, params) {
    const [servers, tools] = await Promise.all([get("/servers"), allTools()]);
    const filter = h("input", { id: "tool-filter", type: "search", placeholder: "Filter tools by name or description", value: params.get("q") || "" });
    const list = h("div", { id: "tool-list" });
    const detail = h("div", { id: "tool-detail-panel", class: "card sticky" }, h("p", { class: "muted" }, "Pick a tool to see its schema."));
    function draw() {
      const needle = filter.value.trim().toLowerCase();
      const shown = tools.filter((t) => !needle || t.name.toLowerCase().includes(needle) || (t.description || "").toLowerCase().includes(needle));
      const groups = new Map();
      for (const t of shown) (groups.get(t.server) || groups.set(t.server, []).get(t.server)).push(t);
      if (!tools.length) return TS.fill(list, h("p", { class: "problem", id: "tool-count" }, TS.noTools()));
      TS.fill(list, h("p", { class: "muted", id: "tool-count" }, shown.length + " of " + fmt.count(tools.length, "tool")),
        [...groups.entries()].map(([server, group]) => h("details", { class: "server-tools", open: needle || groups.size < 4, "data-server": server },
          h("summary", {}, server, " ", h("span", { class: "muted" }, "(" + group.length + ")")),
          h("ul", { class: "tools" }, group.map((t) => h("li", {},
            h("button", { type: "button", class: "link tool-link", "data-name": t.name, onclick: () => TS.fill(detail, toolDetail(t)) }, t.tool),
            t.annotations && t.annotations.destructiveHint ? h("span", { class: "badge bad" }, "destructive") : null,
            t.annotations && t.annotations.readOnlyHint ? h("span", { class: "badge" }, "read-only") : null,
            h("span", { class: "muted" }, " " + (t.description || "").slice(0, 90))))))));
    }
    filter.addEventListener("input", draw);
    draw();
    root.append(h("h1", {}, "Catalog"),
      card("Servers", table([
        { title: "server", cell: (s) => s.id }, { title: "transport", cell: (s) => s.transport },
        { title: "state", cell: (s) => stateBadge(s.state) }, { title: "tools", num: true, cell: (s) => fmt.int(s.tools) },
        { title: "calls", num: true, cell: (s) => fmt.int(s.health ? s.health.calls : null) },
        { title: "failures", num: true, cell: (s) => fmt.int(s.health ? s.health.failures : null) },
        { title: "restarts", num: true, cell: (s) => fmt.int(s.health ? s.health.restarts : null) },
        { title: "p95", num: true, cell: (s) => fmt.ms(s.health && s.health.latency ? s.health.latency.p95_ms : null) },
        { title: "last error", cell: (s) => (s.health && s.health.last_error) || "" },
      ], servers.servers, { id: "servers-table", rowAttrs: (s) => ({ "data-server": s.id }), empty: TS.noTools() })),
      h("div", { class: "two wide-left" }, card("Tools", filter, list), detail));
  }

  TS.pages.catalog = { title: "Catalog", render };
})(window.TS);
