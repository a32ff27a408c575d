/* Overview: calls per hour, error rate, p95 latency per tool, the search funnel, unanswered searches. */
"use strict";
(function (TS) {
  const { h, get, qs, fmt, table, card, charts } = TS;
  const WINDOWS = { "24h": { hours: 24, bucket: "hour" }, "7d": { hours: 168, bucket: "hour" }, "30d": { hours: 720, bucket: "day" } };

  /* Every bucket of the window, empty ones included, oldest first. */
  function fill(series, starts, bucket) {
    const byLabel = new Map(series.map((b) => [b.bucket, b]));
    return starts.map((start) => {
      const label = bucket === "hour" ? TS.iso(start) : TS.iso(start).slice(0, 10);  // a day reads 2026-12-07
      return byLabel.get(label) || { bucket: label, calls: 0, failures: 0, searches: 0, empty_searches: 0 };
    });
  }

  function tile(label, value, id, note) {
    return h("div", { class: "tile", id }, h("div", { class: "tile-value" }, value), h("div", { class: "tile-label" }, label),
      note ? h("div", { class: "tile-note" }, note) : null);
  }

  function funnel(f) {
    const steps = [["Searches", f.searches], ["Followed by a call", f.followed_by_call], ["Followed by a successful call", f.followed_by_success]];
    return charts.hbars(steps.map(([label, value]) => ({
      label, value, text: fmt.int(value) + (f.searches ? "  (" + fmt.pct(value / f.searches) + ")" : ""),
    })), { id: "funnel-chart", label: "search funnel", labelWidth: 190, width: 440 });
  }

  async function render(root, params) {
    const win = WINDOWS[params.get("window")] ? params.get("window") : "24h";
    const { hours, bucket } = WINDOWS[win];
    const starts = TS.bucketStarts(bucket === "hour" ? hours : hours / 24, bucket);
    const since = TS.iso(starts[0]);
    const [ts, tools, fun, zero, never] = await Promise.all([
      get("/analytics/timeseries" + qs({ bucket, since })),
      get("/analytics/tools" + qs({ since, limit: 1000 })),
      get("/console/api/funnel" + qs({ since })),
      get("/analytics/searches/unanswered" + qs({ kind: "no_result", since, limit: 10 })),
      get("/analytics/tools/never-found" + qs({ limit: 1000 })),
    ]);
    const series = fill(ts.series, starts, bucket);
    const calls = series.reduce((a, b) => a + b.calls, 0), failures = series.reduce((a, b) => a + b.failures, 0);
    const searches = series.reduce((a, b) => a + b.searches, 0), empty = series.reduce((a, b) => a + b.empty_searches, 0);
    const picker = h("div", { class: "picker" }, Object.keys(WINDOWS).map((w) =>
      h("a", { href: "#/overview?window=" + w, class: w === win ? "on" : null }, w)));
    const tickEvery = Math.ceil(series.length / 12);
    const points = series.map((b, i) => ({
      label: b.bucket, total: b.calls, part: b.failures,
      tick: i % tickEvery === 0 ? (bucket === "hour" ? b.bucket.slice(11, 16) : b.bucket.slice(5, 10)) : null,
    }));
    const ranked = tools.tools.filter((t) => t.latency_ms.p95 !== null).sort((a, b) => b.latency_ms.p95 - a.latency_ms.p95).slice(0, 15);
    root.append(
      h("div", { class: "row" }, h("h1", {}, "Overview"), picker),
      h("div", { class: "tiles" },
        tile("calls", fmt.int(calls), "tile-calls"),
        tile("error rate", fmt.pct(calls ? failures / calls : null), "tile-error-rate", fmt.int(failures) + " failed"),
        tile("searches", fmt.int(searches), "tile-searches"),
        tile("searches without result", fmt.int(empty), "tile-empty")),
      card("Calls per " + bucket + " (failures in red, UTC)", charts.columns(points, { id: "calls-chart", label: "calls per " + bucket, unit: "calls", partLabel: "failed" })),
      card("p95 latency per tool", ranked.length ? charts.hbars(ranked.map((t) => ({
        label: t.tool, value: t.latency_ms.p95, text: fmt.ms(t.latency_ms.p95) + " · " + fmt.count(t.calls, "call"), bad: t.success_rate !== null && t.success_rate < 0.9,
      })), { id: "latency-chart", label: "p95 latency per tool" }) : h("p", { class: "muted" }, "No calls in this window.")),
      h("div", { class: "two" },
        card("Search funnel", funnel(fun)),
        card("Top queries without result", table([
          { title: "query", cell: (r) => r.query },
          { title: "times", num: true, cell: (r) => fmt.int(r.count) },
          { title: "callers", num: true, cell: (r) => fmt.int(r.callers) },
          { title: "last", cell: (r) => fmt.time(r.last_at) },
        ], zero.queries, { id: "zero-table", empty: searches ? "Every search found something." : "No search in this window." }))),
      card("Tools never found by a search (" + fmt.int(never.tools.length) + ")", table([
        { title: "tool", cell: (r) => r.tool }, { title: "server", cell: (r) => r.server },
        { title: "calls by name", num: true, cell: (r) => fmt.int(r.calls) }, { title: "in catalog since", cell: (r) => fmt.time(r.first_seen_at) },
      ], never.tools.slice(0, 25), { id: "never-table", empty: "Every tool was found at least once." }),
      never.tools.length > 25 ? h("p", { class: "muted" }, "… and " + (never.tools.length - 25) + " more") : null),
    );
  }

  TS.pages.overview = { title: "Overview", render };
})(window.TS);
