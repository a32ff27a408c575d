/* A form generated from a tool's JSON Schema: one field per property, arguments read back typed. */
"use strict";
(function (TS) {
  const { h } = TS;

  function field(name, prop, required) {
    const id = "arg-" + name;
    const type = Array.isArray(prop.type) ? prop.type.find((t) => t !== "null") : prop.type;
    const label = h("label", { for: id }, name, required ? h("span", { class: "req", title: "required" }, " *") : null);
    const help = prop.description ? h("small", {}, prop.description) : null;
    let input;
    if (Array.isArray(prop.enum)) {
      input = h("select", { id, name }, required ? null : h("option", { value: "" }, "—"),
        prop.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
      input.dataset.kind = "enum";
    } else if (type === "boolean") {
      input = h("input", { id, name, type: "checkbox", checked: prop.default === true });
      input.dataset.kind = "boolean";
    } else if (type === "integer" || type === "number") {
      input = h("input", { id, name, type: "number", step: type === "integer" ? "1" : "any",
        min: prop.minimum, max: prop.maximum, value: prop.default, placeholder: prop.default === undefined ? "" : String(prop.default) });
      input.dataset.kind = type;
    } else if (type === "object" || type === "array" || type === undefined) {
      input = h("textarea", { id, name, rows: 3, placeholder: type === "array" ? "[ ... ] (JSON)" : "{ ... } (JSON)" });
      if (prop.default !== undefined) input.value = JSON.stringify(prop.default);
      input.dataset.kind = "json";
    } else {
      input = h("input", { id, name, type: "text", value: prop.default, placeholder: prop.format || "" });
      input.dataset.kind = "string";
    }
    input.dataset.required = required ? "1" : "";
    return h("div", { class: "field" }, label, input, help);
  }

  /* -> {element, read()}: read() returns the arguments object or throws Error naming the bad field. */
  function schemaForm(schema) {
    const props = (schema && schema.properties) || {};
    const required = new Set((schema && schema.required) || []);
    const fields = Object.keys(props).map((name) => field(name, props[name] || {}, required.has(name)));
    const element = h("div", { class: "schema-form" }, fields.length ? fields : h("p", { class: "muted" }, "This tool takes no arguments."));
    function read() {
      const args = {};
      for (const input of element.querySelectorAll("input, select, textarea")) {
        const kind = input.dataset.kind, name = input.name;
        if (kind === "boolean") { if (input.checked || input.dataset.required) args[name] = input.checked; continue; }
        const raw = input.value;
        if (raw === "") continue;  // left empty: the server's schema check reports a missing required field
        if (kind === "integer" || kind === "number") args[name] = Number(raw);
        else if (kind === "enum") args[name] = JSON.parse(raw);
        else if (kind === "json") {
          try { args[name] = JSON.parse(raw); } catch (e) { throw new Error(name + ": not valid JSON"); }
        } else args[name] = raw;
      }
      return args;
    }
    return { element, read };
  }

  TS.schemaForm = schemaForm;
})(window.TS);
