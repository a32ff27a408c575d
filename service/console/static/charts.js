/* Small SVG charts drawn by hand: columns over time, labelled horizontal bars, diverging signal bars. */
"use strict";
(function (TS) {
  const NS = "http://www.w3.org/2000/svg";

  function s(tag, attrs, ...children) {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
    for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(value)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= value) return m * p;
    return 10 * p;
  }

  /* Columns per bucket: `total` as the column, `part` (e.g. failures) drawn over its foot in red. */
  function columns(points, o) {
    const W = o.width || 720, H = o.height || 200, L = 44, B = 26, T = 10, R = 8;
    const max = niceMax(Math.max(0, ...points.map((p) => p.total)));
    const step = (W - L - R) / Math.max(1, points.length);
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": o.label, id: o.id });
    for (const t of [0, 0.5, 1]) {
      svg.append(s("line", { x1: L, x2: W - R, y1: y(max * t), y2: y(max * t), class: "gridline" }),
        s("text", { x: L - 6, y: y(max * t) + 4, class: "axis", "text-anchor": "end" }, TS.fmt.int(max * t)));
    }
    points.forEach((p, i) => {
      const x = L + i * step + step * 0.12, w = Math.max(1, step * 0.76);
      const g = s("g", { class: "col", "data-bucket": p.label, "data-total": p.total, "data-part": p.part || 0 },
        s("title", {}, `${p.label}: ${p.total} ${o.unit || ""}${p.part ? ", " + p.part + " " + (o.partLabel || "") : ""}`));
      g.append(s("rect", { x, width: w, y: y(p.total), height: Math.max(0, y(0) - y(p.total)), class: "bar" }));
      if (p.part) g.append(s("rect", { x, width: w, y: y(p.part), height: Math.max(0, y(0) - y(p.part)), class: "bar bad" }));
      svg.append(g);
      if (p.tick) svg.append(s("text", { x: x + w / 2, y: H - 8, class: "axis", "text-anchor": "middle" }, p.tick));
    });
    return svg;
  }

  /* One labelled horizontal bar per item, value printed at its end. */
  function hbars(items, o) {
    const W = o.width || 720, row = 22, L = o.labelWidth || 240, R = 80;
    const H = Math.max(row, items.length * row) + 6;
    const max = niceMax(Math.max(0, ...items.map((i) => i.value)));
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": o.label, id: o.id });
    items.forEach((item, i) => {
      const y = 3 + i * row, w = ((W - L - R) * item.value) / max;
      svg.append(s("g", { class: "hbar", "data-label": item.label, "data-value": item.value },
        s("title", {}, `${item.label}: ${item.text}`),
        s("text", { x: L - 8, y: y + 15, class: "label", "text-anchor": "end" }, item.label.length > 34 ? item.label.slice(0, 33) + "…" : item.label),
        s("rect", { x: L, y: y + 3, width: Math.max(1, w), height: row - 8, class: "bar" + (item.bad ? " bad" : "") }),
        s("text", { x: L + w + 6, y: y + 15, class: "value" }, item.text)));
    });
    return svg;
  }

  /* Diverging bars around zero, one per signal: the weighted z-score each signal added to the score. */
  function signals(values, scale, o) {
    const names = Object.keys(values);
    // The labels' column fits the longest name (about 6.5 units a character at the chart's font): a fixed 78 cut
    // `question_read` to `uestion_read`.
    const longest = Math.max(0, ...names.map((name) => name.length));
    const W = (o && o.width) || 300, row = 16, L = Math.max(78, Math.ceil(10 + 6.5 * longest));
    const mid = L + (W - L - 44) / 2, half = (W - L - 44) / 2;
    const svg = s("svg", { viewBox: `0 0 ${W} ${names.length * row + 2}`, class: "chart signals", role: "img", "aria-label": "signals" });
    svg.append(s("line", { x1: mid, x2: mid, y1: 0, y2: names.length * row, class: "zero" }));
    names.forEach((name, i) => {
      const v = values[name], w = (half * Math.min(1, Math.abs(v) / (scale || 1)));
      const y = i * row;
      svg.append(s("g", { class: "signal", "data-signal": name, "data-value": v },
        s("text", { x: L - 6, y: y + 12, class: "label", "text-anchor": "end" }, name),
        s("rect", { x: v >= 0 ? mid : mid - w, y: y + 3, width: Math.max(0.5, w), height: row - 6, class: v >= 0 ? "bar" : "bar bad" }),
        s("text", { x: W - 2, y: y + 12, class: "value", "text-anchor": "end" }, (v >= 0 ? "+" : "") + v.toFixed(3))));
    });
    return svg;
  }

  TS.charts = { columns, hbars, signals, niceMax };
})(window.TS);
