/* Search playground: ranked tools with a bar per signal, the exact-name hit, the parts of a multi-intent
   request, and a call through a form generated from the chosen tool's JSON Schema. */
"use strict";
(function (TS) {
  const { h, post, fmt, card, charts, problemBox } = TS;

  // The bars' names are the explain's signal keys, which only the README told apart.
  const LEGEND = () => h("p", { class: "muted", id: "signals-legend" },
    "The number beside a tool is its fused score; each bar is one signal's share of it (z-scored over the candidates, " +
    "weighted): name, description, params — how near the request is to that field of the tool; lexical — the " +
    "request's words (BM25); server — how near it is to the tool's server; name_verb, lead_verb, question_read, " +
    "opposed_verb — the verb rules; part — the penalty of a tool found by one part of a split request; usage, " +
    "adapter — learned from use. See the README's Search section.");

  function resultView(result, rank, scale, search, callPanel) {
    const ex = result.explain || {};
    const badges = [
      ex.exact_name ? h("span", { class: "badge good", "data-exact": "1" }, "exact name") : null,
      ex.matched_part ? h("span", { class: "badge", title: "best part of the request" }, "part: " + ex.matched_part) : null,
      result.annotations && result.annotations.destructiveHint ? h("span", { class: "badge bad" }, "destructive") : null,
    ];
    const boosts = Object.entries(ex.boosts || {}).filter(([, v]) => v !== 0);
    return h("li", { class: "result", "data-name": result.name, "data-score": result.score },
      h("div", { class: "result-head" },
        h("span", { class: "rank" }, String(rank)), h("strong", {}, result.name),
        h("span", { class: "score", title: "fused score" }, fmt.num(result.score)), badges,
        h("button", { type: "button", class: "try", onclick: () => callPanel(result, search) }, "Try a call")),
      h("p", { class: "desc" }, result.description),
      h("div", { class: "explain" }, charts.signals(ex.signals || {}, scale),
        boosts.length ? h("div", { class: "boosts" }, "boosts: ", boosts.map(([k, v]) => k + " " + (v > 0 ? "+" : "") + v.toFixed(3)).join(", ")) : null));
  }

  function renderCall(panel, tool, search) {
    const form = TS.schemaForm(tool.input_schema || {});
    const output = h("div", { class: "call-output", id: "call-output" });
    let approval = null;
    async function run(ev) {
      ev.preventDefault();
      TS.fill(output);
      let args;
      try { args = form.read(); } catch (e) { output.append(problemBox(e)); return; }
      const body = { name: tool.name, arguments: args, search_id: search.search_id };
      if (approval) body.approval_id = approval;
      try {
        const r = await post("/execute", body);
        approval = null;
        output.append(h("div", { class: "call-status", "data-status": r.status },
            h("span", { class: "badge " + (r.is_error ? "bad" : "good") }, r.status), " ", fmt.ms(r.duration_ms), " · execution ", h("code", {}, r.execution_id)),
          h("pre", { class: "call-result" }, r.content.map((c) => (c.type === "text" ? c.text : JSON.stringify(c))).join("\n")));
      } catch (err) {
        output.append(problemBox(err));
        if (err.body && err.body.approval_id) {
          approval = err.body.approval_id;
          output.append(h("p", { class: "muted", id: "approval-note" }, "Approval ", h("code", {}, approval),
            " is pending. Once an approver grants it (Approvals page), press Call again to use it."));
        }
      }
    }
    TS.fill(panel, card("Call " + tool.name,
      h("p", { class: "muted" }, tool.description),
      h("form", { id: "call-form", onsubmit: run }, form.element, h("button", { type: "submit" }, "Call")), output));
    panel.scrollIntoView({ block: "nearest" });
  }

  async function render(root, params) {
    const query = h("textarea", { id: "query", rows: 2, placeholder: "What should the agent do? e.g. what time is it in Tokyo, then fetch example.com" });
    query.value = params.get("q") || "";
    const k = h("input", { id: "k", type: "number", min: 1, max: 50, value: params.get("k") || 5 });
    const out = h("div", { id: "results" });
    const panel = h("div", { id: "call-panel" });
    async function search(ev) {
      if (ev) ev.preventDefault();
      TS.fill(out, h("p", { class: "muted" }, "Searching…"));
      TS.fill(panel);
      try {
        const r = await post("/search", { query: query.value, k: Number(k.value) || 5, explain: true });
        const scale = Math.max(0.01, ...r.results.flatMap((x) => Object.values((x.explain || {}).signals || {}).map(Math.abs)));
        TS.fill(out,
          h("p", { class: "muted", id: "search-meta" }, fmt.count(r.results.length, "tool") + " in " + fmt.ms(r.latency_ms) + " · search ", h("code", {}, r.search_id)),
          r.results.length ? LEGEND() : null,
          r.parts && r.parts.length ? h("div", { class: "parts", id: "parts" }, "Request split into ", String(r.parts.length), " parts: ",
            r.parts.map((p) => h("span", { class: "badge part" }, p))) : null,
          r.results.length ? h("ol", { class: "results" }, r.results.map((x, i) => resultView(x, i + 1, scale, r, (t, s) => renderCall(panel, t, s))))
            : h("p", { class: "problem" }, "No tool matched (this search counts as one without result)."));
      } catch (err) {
        TS.fill(out, problemBox(err));
      }
    }
    root.append(h("h1", {}, "Search playground"),
      card(null, h("form", { id: "search-form", class: "search-form", onsubmit: search }, query,
        h("label", {}, "k ", k), h("button", { type: "submit" }, "Search"))),
      h("div", { class: "two wide-left" }, out, panel));
    if (query.value) await search();
  }

  TS.pages.playground = { title: "Search playground", render };
})(window.TS);
