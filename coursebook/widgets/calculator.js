// The cache calculator of Chapter 3, drawn and recomputed in the browser (calculator.py, beside
// it, is its Python side: the traits, the presets, and `result` from lessons.memory).
//
// Every number is an exact integer (BigInt): a cache of 2 * L * G * d * T * b bytes passes
// 2**53 long before the fields reach their limits, and a JavaScript Number would round it.
// The named exports below are the arithmetic and the words; the site test calls them on many
// inputs and compares with lessons.memory.

import {
  h, field, choice, toggle, messageArea, stackedBars, legend, formatInt, fixed, roundHalfEven,
  parseWhole, parseAmount,
} from "course-widgets";

const WHOLE = ["layers", "kv_heads", "head_dim", "tokens"];
const MODEL_FIELDS = ["layers", "kv_heads", "head_dim", "weights"];
const KIB = 1024n;
const MIB = 1024n ** 2n;
const GIB = 1024n ** 3n;

/** coursebook.widgets.calculator.calculate: BigInt inputs, BigInt (and boolean) outputs. */
export function calculate({ layers, kvHeads, headDim, tokens, bytesPerValue, gpuBytes, weightBytes }) {
  const perToken = 2n * layers * kvHeads * headDim * bytesPerValue;
  const perSequence = perToken * tokens;
  const spare = gpuBytes > weightBytes ? gpuBytes - weightBytes : 0n;
  const maxTokens = spare > 0n ? spare / perToken : 0n;
  const maxBatch = spare > 0n ? spare / perSequence : 0n;
  return {
    bytes_per_token: perToken,
    bytes_per_sequence: perSequence,
    gpu_bytes: gpuBytes,
    weight_bytes: weightBytes,
    spare_bytes: spare,
    max_tokens: maxTokens,
    max_batch: maxBatch,
    batch_cache_bytes: maxBatch * perSequence,
    left_bytes: spare - maxBatch * perSequence,
    weights_fit: weightBytes < gpuBytes,
  };
}

/** lessons.memory.format_bytes: the largest binary unit reached, whole when exact, else to
 * two decimals without trailing zeros. */
export function formatBytes(n) {
  for (const [unit, size] of [["GiB", GIB], ["MiB", MIB], ["KiB", KIB]]) {
    if (n >= size) {
      if (n % size === 0n) {
        return `${formatInt(n / size)} ${unit}`;
      }
      return `${fixed(Number(n) / Number(size), 2).replace(/0+$/, "").replace(/\.$/, "")} ${unit}`;
    }
  }
  return `${formatInt(n)} bytes`;
}

/** coursebook.widgets.calculator.to_bytes: an amount of a unit (a Number of bytes) to the nearest byte. */
export function toBytes(amount, unitBytes) {
  return roundHalfEven(amount * unitBytes);
}

/** coursebook.widgets.calculator.preset_amount: a preset's bytes (a Number) as its field shows them, in
 * a unit of unitBytes, to two decimals (Python's round(x, 2): the exact value, ties to even). */
export function presetAmount(nBytes, unitBytes) {
  return Number(fixed(nBytes / unitBytes, 2, false));
}

/** coursebook.widgets.calculator.summary_rows: the table's [label, text] rows. */
export function summaryRows(r, tokens, unit, unitBytes) {
  const both = (n) => `${formatInt(n)} bytes (${formatBytes(n)})`;
  const amount = (n) => `${formatInt(n)} bytes (${fixed(Number(n) / unitBytes, 2)} ${unit})`;
  const rows = [
    ["cache per token", both(r.bytes_per_token)],
    [`cache per sequence of ${formatInt(tokens)} tokens`, both(r.bytes_per_sequence)],
    ["GPU memory", amount(r.gpu_bytes)],
    ["weights", amount(r.weight_bytes)],
  ];
  if (r.weights_fit) {
    rows.push(["left for caches", amount(r.spare_bytes)]);
    rows.push(["tokens that fit", formatInt(r.max_tokens)]);
    rows.push(["sequences that fit (batch)", formatInt(r.max_batch)]);
  } else {
    rows.push(["sequences that fit (batch)", "0: the weights alone do not fit in this GPU"]);
  }
  return rows;
}

/** The bar's rows for stackedBars: weights, one outlined block per sequence while a block is
 * at least 3 px wide (else one block for the batch), what is left; or, when the weights do not
 * fit, the weights alone past a black tick at the GPU's memory. */
function memoryBar(r, colours, width) {
  const total = Number(r.gpu_bytes > r.weight_bytes ? r.gpu_bytes : r.weight_bytes) || 1;
  const segments = [{ value: Number(r.weight_bytes), color: colours.weights, part: "weights",
    title: `weights: ${formatBytes(r.weight_bytes)}` }];
  if (r.weights_fit) {
    const perSequence = Number(r.bytes_per_sequence);
    const batch = Number(r.max_batch);
    if (batch && (perSequence / total) * (width - 2) >= 3) {
      for (let i = 0; i < batch; i += 1) {
        segments.push({ value: perSequence, color: colours.caches, outline: true, part: "sequence",
          title: `sequence ${i + 1}: ${formatBytes(r.bytes_per_sequence)}` });
      }
    } else if (batch) {
      segments.push({ value: Number(r.batch_cache_bytes), color: colours.caches, part: "caches",
        title: `${formatInt(r.max_batch)} sequences: ${formatBytes(r.batch_cache_bytes)}` });
    }
    segments.push({ value: Number(r.left_bytes), color: colours.left, part: "left",
      title: `left over: ${formatBytes(r.left_bytes)}` });
  }
  return stackedBars({
    rows: [{ key: "memory", segments }], max: total, width, barHeight: 30, gap: 8,
    marker: r.weights_fit ? undefined : Number(r.gpu_bytes),
    ariaLabel: "GPU memory: weights, caches, left over",
  });
}

function render({ model, el }) {
  const cfg = model.get("config");
  const units = cfg.units;
  const unitBytes = () => units[model.get("unit")];
  const controls = {};
  const texts = {};

  // -- reading the fields -------------------------------------------------------------------
  function parsed(name) {
    if (WHOLE.includes(name)) {
      const f = cfg.fields[name];
      return parseWhole(controls[name].text, { label: f.label, min: f.min, max: f.max });
    }
    const a = cfg.amounts[name];
    return parseAmount(controls[name].text, { label: a.label, min: a.min, max: a.max, unit: model.get("unit") });
  }
  function sameAsModel(name) {
    const p = parsed(name);
    return !p.error && Number(p.value) === Number(model.get(name));
  }

  // -- presets (calculator.py does the same for a notebook's changes) -----------------------------
  // A preset fills its fields with its amounts in the current unit, to two decimals; while it is
  // chosen, its exact bytes are counted.  A preset whose fields no longer show it is "custom".
  function modelPresetValues(key, unit) {
    const m = cfg.models[key];
    return m ? { layers: m.layers, kv_heads: m.kv_heads, head_dim: m.head_dim,
      weights: presetAmount(m.weight_bytes, units[unit]) } : {};
  }
  function gpuPresetValues(key, unit) {
    const g = cfg.gpus[key];
    return g ? { gpu_memory: presetAmount(g.memory_bytes, units[unit]) } : {};
  }
  function matchesModelPreset(values) {
    const m = cfg.models[values.model_preset];
    return Boolean(m) && values.layers === m.layers && values.kv_heads === m.kv_heads && values.head_dim === m.head_dim
      && values.weights === presetAmount(m.weight_bytes, units[values.unit]);
  }
  function matchesGpuPreset(values) {
    const g = cfg.gpus[values.gpu_preset];
    return Boolean(g) && values.gpu_memory === presetAmount(g.memory_bytes, units[values.unit]);
  }
  function gpuBytes() {
    const g = cfg.gpus[model.get("gpu_preset")];
    return g ? BigInt(g.memory_bytes) : toBytes(model.get("gpu_memory"), unitBytes());
  }
  function weightBytes() {
    const m = cfg.models[model.get("model_preset")];
    return m ? BigInt(m.weight_bytes) : toBytes(model.get("weights"), unitBytes());
  }
  // The unit switch: the memory fields keep their numbers, read in the new unit, and a preset
  // they no longer show becomes custom (24 GB is an A10's memory, 24 GiB is not).
  function unitChanges(unit) {
    const values = { ...current(), unit };
    const changes = { unit };
    if (cfg.models[values.model_preset] && !matchesModelPreset(values)) changes.model_preset = "custom";
    if (cfg.gpus[values.gpu_preset] && !matchesGpuPreset(values)) changes.gpu_preset = "custom";
    return changes;
  }
  function current() {
    const names = ["model_preset", "gpu_preset", "unit", "bytes_per_value", ...WHOLE, "weights", "gpu_memory"];
    return Object.fromEntries(names.map((n) => [n, model.get(n)]));
  }
  function commit(changes) {
    model.set(changes);
    model.save_changes();
  }

  function typed(name) {
    const p = parsed(name);
    if (!p.error) {
      const values = { ...current(), [name]: Number(p.value) };
      const changes = { [name]: Number(p.value) };
      if (MODEL_FIELDS.includes(name) && cfg.models[values.model_preset] && !matchesModelPreset(values)) {
        changes.model_preset = "custom";
      }
      if (name === "gpu_memory" && cfg.gpus[values.gpu_preset] && !matchesGpuPreset(values)) {
        changes.gpu_preset = "custom";
      }
      commit(changes);
    }
    redraw();
  }

  // -- the form -----------------------------------------------------------------------------
  const modelOptions = [...Object.entries(cfg.models).map(([k, m]) => [m.name, k]), ["custom", "custom"]];
  const gpuOptions = [...Object.entries(cfg.gpus).map(([k, g]) => [g.name, k]), ["custom", "custom"]];
  controls.model_preset = choice({
    label: "model", name: "model_preset", options: modelOptions, value: model.get("model_preset"),
    onChange: (key) => commit({ model_preset: key, ...modelPresetValues(key, model.get("unit")) }),
  });
  controls.gpu_preset = choice({
    label: "GPU", name: "gpu_preset", options: gpuOptions, value: model.get("gpu_preset"),
    onChange: (key) => commit({ gpu_preset: key, ...gpuPresetValues(key, model.get("unit")) }),
  });
  controls.bytes_per_value = choice({
    label: "bytes per value b", name: "bytes_per_value", options: cfg.bytes_per_value,
    value: model.get("bytes_per_value"), onChange: (b) => commit({ bytes_per_value: Number(b) }),
  });
  controls.unit = toggle({
    label: "memory unit", name: "unit", options: Object.keys(units).map((u) => [u, u]), value: model.get("unit"),
    onChange: (unit) => commit(unitChanges(unit)),
  });
  for (const name of WHOLE) {
    controls[name] = field({ label: cfg.fields[name].label, name, value: model.get(name), onInput: () => typed(name) });
  }
  for (const name of ["weights", "gpu_memory"]) {
    controls[name] = field({
      label: cfg.amounts[name].label, name, value: model.get(name), unit: model.get("unit"), inputmode: "decimal",
      onInput: () => typed(name),
    });
  }

  const message = messageArea();
  const table = h("table", { class: "cw-table kv-calculator" });
  const chart = h("div", { class: "cw-chart" });
  const figures = h("div", { class: "cw-figures" }, table, chart);
  el.replaceChildren(h("div", { class: "cw-widget kv-calculator-widget" },
    h("div", { class: "cw-columns" },
      h("div", { class: "cw-column" }, h("p", { class: "cw-heading" }, "Model"),
        ["model_preset", "layers", "kv_heads", "head_dim", "weights"].map((n) => controls[n].element)),
      h("div", { class: "cw-column" }, h("p", { class: "cw-heading" }, "Cache and GPU"),
        ["tokens", "bytes_per_value", "gpu_preset", "gpu_memory", "unit"].map((n) => controls[n].element))),
    message.element, figures));

  // -- drawing --------------------------------------------------------------------------------
  function redraw() {
    const errors = [];
    for (const name of [...WHOLE, "weights", "gpu_memory"]) {
      const p = parsed(name);
      controls[name].invalid(p.error || "");
      if (p.error) errors.push(p.error);
    }
    if (errors.length) {
      errors.push("The figures below are for the last values that were valid.");
    }
    message.show(errors);
    figures.classList.toggle("cw-stale", errors.length > 0);

    const unit = model.get("unit");
    const r = calculate({
      layers: BigInt(model.get("layers")), kvHeads: BigInt(model.get("kv_heads")),
      headDim: BigInt(model.get("head_dim")), tokens: BigInt(model.get("tokens")),
      bytesPerValue: BigInt(model.get("bytes_per_value")),
      gpuBytes: gpuBytes(), weightBytes: weightBytes(),
    });
    const rows = summaryRows(r, model.get("tokens"), unit, unitBytes());
    table.replaceChildren(...rows.map(([label, text], i) => h("tr", { "data-row": label },
      h("td", {}, label),
      h("td", { class: "cw-num" }, i === rows.length - 1 ? h("b", {}, text) : text))));
    const width = 640;
    const items = [
      { label: "weights", color: cfg.colours.weights },
      { label: `caches (${formatInt(r.max_batch)} sequences)`, color: cfg.colours.caches, outline: true },
      { label: "left over", color: cfg.colours.left },
    ];
    if (!r.weights_fit) items.push({ label: "black tick: end of the GPU's memory: the weights do not fit", color: "currentColor" });
    chart.replaceChildren(memoryBar(r, cfg.colours, width), legend(items));
  }

  // A change from the notebook (JupyterLab) or from this page: a field whose value changed shows
  // it, unless its text already says that value (the reader may be typing in it); a field the
  // reader left invalid keeps the reader's text until its own value changes.  Then redraw.
  const listeners = [];
  function listen(event, callback) {
    model.on(event, callback);
    listeners.push([event, callback]);
  }
  for (const name of ["model_preset", "gpu_preset", "bytes_per_value", "unit"]) {
    listen(`change:${name}`, () => controls[name].set(model.get(name)));
  }
  for (const name of [...WHOLE, "weights", "gpu_memory"]) {
    listen(`change:${name}`, () => {
      if (!sameAsModel(name)) controls[name].set(model.get(name));
    });
  }
  listen("change:unit", () => {
    for (const name of ["weights", "gpu_memory"]) controls[name].setUnit(model.get("unit"));
  });
  listen("change", redraw);
  redraw();
  return () => listeners.forEach(([event, callback]) => model.off(event, callback));
}

export default { render };
