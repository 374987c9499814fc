// course-widgets: what every course widget's ES module imports.
//
//   import { h, field, stackedBars, formatInt } from "course-widgets";
//
// A widget's module is sent whole to the browser (the anywidget "_esm" trait), so this file is
// inlined into it by coursebook.widgets.module (only the imported names become visible, as with
// a real import).  Everything here runs in the reader's browser with no kernel and no network:
//
//   numbers   exact integers (BigInt) written as Python writes them: formatInt, fixed,
//             roundHalfEven, ratioText; and the parsing of what a reader types: parseWhole,
//             parseAmount (a clear message for bad input, never NaN)
//   controls  field, choice, toggle, slider, button: labelled HTML controls that call back
//             with the new value
//   drawing   h, svg, stackedBars, lineChart, legend: the figures, as SVG
//
// Python twins: coursebook.widgets.numbers formats the same way; the site test compares them.

// ------------------------------------------------------------------------------ numbers

/** "1234567" -> "1,234,567" (a string of digits, with an optional leading minus). */
export function groupDigits(digits) {
  const s = String(digits);
  const sign = s.startsWith("-") ? "-" : "";
  const body = sign ? s.slice(1) : s;
  return sign + body.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** An integer (BigInt, or a Number holding a whole value) with thousands separators:
 * Python's f"{n:,}". */
export function formatInt(n) {
  return groupDigits(BigInt(n).toString());
}

/** The exact value of a finite double: |x| = mant * 2**exp, mant and exp integers. */
function exactDouble(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  let mant = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let exp = -1074;
  if (biased !== 0) {
    mant |= 1n << 52n;
    exp = biased - 1075;
  }
  return { negative: hi >>> 31 === 1, mant, exp };
}

/** num / den rounded to the nearest integer, ties to even (den > 0, num >= 0; BigInts). */
function divideHalfEven(num, den) {
  let q = num / den;
  const twice = 2n * (num % den);
  if (twice > den || (twice === den && q % 2n === 1n)) {
    q += 1n;
  }
  return q;
}

/** Python's round(x) for a finite double: the nearest integer, ties to even, as a BigInt. */
export function roundHalfEven(x) {
  if (!Number.isFinite(x)) {
    throw new RangeError(`cannot round ${x}`);
  }
  const { negative, mant, exp } = exactDouble(x);
  const q = exp >= 0 ? mant << BigInt(exp) : divideHalfEven(mant, 1n << BigInt(-exp));
  return negative ? -q : q;
}

/** Python's f"{x:,.{digits}f}" (group = true) or f"{x:.{digits}f}": the exact value of the
 * double rounded half to even, which is what Python does (Number.toFixed rounds ties up). */
export function fixed(x, digits = 2, group = true) {
  if (!Number.isFinite(x)) {
    throw new RangeError(`cannot format ${x}`);
  }
  const { negative, mant, exp } = exactDouble(x);
  let num = mant * 10n ** BigInt(digits);
  let den = 1n;
  if (exp >= 0) {
    num <<= BigInt(exp);
  } else {
    den <<= BigInt(-exp);
  }
  const s = divideHalfEven(num, den).toString().padStart(digits + 1, "0");
  let whole = s.slice(0, s.length - digits);
  if (group) {
    whole = groupDigits(whole);
  }
  return (negative ? "-" : "") + (digits ? `${whole}.${s.slice(s.length - digits)}` : whole);
}

/** "a / b" of two integers (BigInt or Number) as Python's f"{a / b:,.{digits}f}" (true
 * division, correctly rounded: both integers must be below 2**53, as they are once the caller
 * checked its data). */
export function ratioText(a, b, digits = 2) {
  return fixed(Number(a) / Number(b), digits);
}

const GROUPED = /^\d{1,3}(,\d{3})+$/;
const SHOWN_MAX = 40;

function quoted(text) {
  const s = text.length > SHOWN_MAX ? `${text.slice(0, SHOWN_MAX)}...` : text;
  return `"${s}"`;
}

/** A whole number a reader typed, checked: {value: BigInt} or {error: a sentence}.
 *
 * Accepts digits with an optional "+", thousands separators written as "4,096" or "4 096" or
 * "4_096"; refuses the empty field, signs, decimals, exponents and anything outside
 * [min, max] (BigInt or Number bounds), each with its own message naming the field. */
export function parseWhole(text, { label, min, max }) {
  const raw = String(text ?? "").trim();
  if (raw === "") {
    return { error: `${label}: the field is empty; type a whole number.` };
  }
  let digits = raw.replace(/[\s_]/g, "");
  if (GROUPED.test(digits)) {
    digits = digits.replace(/,/g, "");
  }
  digits = digits.replace(/^\+/, "");
  if (/^-\d+$/.test(digits)) {
    return { error: `${label} cannot be negative (${quoted(raw)}); type a whole number from ${formatInt(min)} to ${formatInt(max)}.` };
  }
  if (!/^\d+$/.test(digits)) {
    return { error: `${label}: ${quoted(raw)} is not a whole number; type digits only, such as ${formatInt(max < 4096n ? max : 4096n)}.` };
  }
  const value = BigInt(digits);
  if (value < BigInt(min)) {
    return { error: `${label} must be at least ${formatInt(min)} (you typed ${quoted(raw)}).` };
  }
  if (value > BigInt(max)) {
    return { error: `${label} must be at most ${formatInt(max)} (you typed ${quoted(raw)}).` };
  }
  return { value };
}

/** An amount a reader typed (a decimal such as "24", "22.35", "1e3"), checked: {value: Number}
 * or {error: a sentence}.  A decimal comma is refused rather than misread. */
export function parseAmount(text, { label, min, max, unit = "" }) {
  const raw = String(text ?? "").trim();
  const shownUnit = unit ? ` ${unit}` : "";
  if (raw === "") {
    return { error: `${label}: the field is empty; type an amount${shownUnit}.` };
  }
  let s = raw.replace(/[\s_]/g, "");
  if (GROUPED.test(s.split(".")[0]) && !s.includes("e") && !s.includes("E")) {
    s = s.replace(/,/g, "");
  }
  s = s.replace(/^\+/, "");
  if (/^-/.test(s) && /^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s)) {
    return { error: `${label} cannot be negative (${quoted(raw)}).` };
  }
  if (/^\d+,\d+$/.test(s)) {
    return { error: `${label}: write decimals with a point (${quoted(raw)}: did you mean ${s.replace(",", ".")}?).` };
  }
  if (!/^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s)) {
    return { error: `${label}: ${quoted(raw)} is not a number; type an amount${shownUnit}, such as 24 or 22.5.` };
  }
  const value = Number(s);
  if (!Number.isFinite(value) || value > max) {
    return { error: `${label} must be at most ${fixed(max, 0)}${shownUnit} (you typed ${quoted(raw)}).` };
  }
  if (value < min) {
    return { error: `${label} must be at least ${fixed(min, 0)}${shownUnit} (you typed ${quoted(raw)}).` };
  }
  return { value };
}

// ------------------------------------------------------------------------------ DOM

const SVG_NS = "http://www.w3.org/2000/svg";

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else if (key === "text") {
      node.textContent = String(value);
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: h("p", {class: "x", onclick: fn}, "text", child, [more children]). */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, as h() makes HTML ones. */
export function svg(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

let uid = 0;
function nextId(prefix) {
  uid += 1;
  return `cw-${prefix}-${uid}`;
}

/** A labelled text field.  onInput(text) on every keystroke; set(text) shows a value without
 * calling back; invalid(message) marks it (aria-invalid) or clears the mark (""). */
export function field({ label, name, value = "", unit = "", onInput, inputmode = "numeric" }) {
  const id = nextId(name || "field");
  const input = h("input", {
    id, type: "text", class: "cw-input", name, inputmode, autocomplete: "off", spellcheck: "false",
    "data-control": name,
  });
  input.value = String(value);
  input.addEventListener("input", () => onInput && onInput(input.value));
  const unitEl = h("span", { class: "cw-unit" }, unit);
  const element = h("div", { class: "cw-row" },
    h("label", { for: id, class: "cw-label" }, label), input, unitEl);
  return {
    element,
    input,
    get text() { return input.value; },
    set(text) { input.value = String(text); },
    setUnit(text) { unitEl.textContent = text; },
    invalid(message) {
      if (message) {
        input.setAttribute("aria-invalid", "true");
        input.title = message;
      } else {
        input.removeAttribute("aria-invalid");
        input.removeAttribute("title");
      }
    },
  };
}

/** A labelled drop-down list of [text, value] options (values are strings on the page: the
 * caller maps them back).  onChange(value); set(value) without calling back. */
export function choice({ label, name, options, value, onChange }) {
  const id = nextId(name || "choice");
  const select = h("select", { id, class: "cw-select", name, "data-control": name },
    options.map(([text, v]) => h("option", { value: String(v) }, text)));
  select.value = String(value);
  select.addEventListener("change", () => onChange && onChange(select.value));
  const element = h("div", { class: "cw-row" }, h("label", { for: id, class: "cw-label" }, label), select);
  return {
    element,
    select,
    get value() { return select.value; },
    set(v) { select.value = String(v); },
  };
}

/** A row of toggle buttons, one pressed: [text, value] options.  onChange(value); set(value). */
export function toggle({ label, name, options, value, onChange }) {
  let current = String(value);
  const buttons = options.map(([text, v]) => h("button", {
    type: "button", class: "cw-toggle", "data-value": String(v), "data-control": name,
    onclick: () => {
      if (String(v) === current) return;
      set(v);
      onChange && onChange(String(v));
    },
  }, text));
  function set(v) {
    current = String(v);
    for (const b of buttons) {
      b.setAttribute("aria-pressed", String(b.dataset.value === current));
    }
  }
  set(current);
  const labelId = nextId(name || "toggle");
  const element = h("div", { class: "cw-row" },
    h("span", { class: "cw-label", id: labelId }, label),
    h("span", { class: "cw-toggles", role: "group", "aria-labelledby": labelId }, buttons));
  return { element, buttons, get value() { return current; }, set };
}

/** A labelled slider over the integer positions 0 .. count - 1, showing show(position) beside
 * it.  onInput(position) while it moves; set(position). */
export function slider({ label, name, count, position, show, onInput }) {
  const id = nextId(name || "slider");
  const input = h("input", {
    id, type: "range", class: "cw-slider", name, min: 0, max: count - 1, step: 1,
    "data-control": name,
  });
  input.value = String(position);
  const output = h("output", { for: id, class: "cw-slider-value" }, show(position));
  input.addEventListener("input", () => {
    const p = Number(input.value);
    output.textContent = show(p);
    onInput && onInput(p);
  });
  const element = h("div", { class: "cw-row" }, h("label", { for: id, class: "cw-label" }, label), input, output);
  return {
    element,
    input,
    set(p) {
      input.value = String(p);
      output.textContent = show(p);
    },
  };
}

/** A push button: onClick(). */
export function button({ label, name, onClick }) {
  return h("button", { type: "button", class: "cw-button", "data-control": name, onclick: () => onClick() }, label);
}

/** A place for the widget's message about bad input (role=alert: screen readers say it). */
export function messageArea() {
  const element = h("p", { class: "cw-message", role: "alert" });
  element.hidden = true;
  return {
    element,
    show(lines) {
      const list = (Array.isArray(lines) ? lines : [lines]).filter(Boolean);
      element.replaceChildren(...list.map((line, i) => (i ? [h("br"), line] : line)).flat());
      element.hidden = list.length === 0;
    },
  };
}

// ------------------------------------------------------------------------------ drawing

/** A legend: [{label, color, outline}] as swatches and words (HTML: it wraps on a narrow page). */
export function legend(items) {
  return h("div", { class: "cw-legend" }, items.map(({ label, color, outline }) => h("span", { class: "cw-legend-item" },
    h("span", {
      class: "cw-swatch",
      style: `background:${color}` + (outline ? ";outline:1px solid #fff;outline-offset:-3px" : ""),
    }),
    label)));
}

/** Horizontal stacked bars on one scale.
 *
 * rows: [{label, note, segments: [{value, color, title, part, outline}]}], values Numbers
 * (drawing only: exact numbers belong in the text beside the figure); max: the value the full
 * width stands for (the largest row when omitted); marker: a value drawn as a black tick across
 * every row (a limit, such as a GPU's memory).  A segment of value 0 draws nothing.  Each rect
 * carries data-part (its part's name) for tests and styles. */
export function stackedBars({ rows, max, width = 640, barHeight = 28, gap = 10, labelWidth = 0,
  noteWidth = 0, marker, ariaLabel = "" }) {
  const totals = rows.map((r) => r.segments.reduce((s, seg) => s + Math.max(seg.value, 0), 0));
  const full = max || Math.max(1, ...totals, marker || 0);
  const plot = width - labelWidth - noteWidth - 2;
  const scale = plot / full;
  const height = rows.length * (barHeight + gap) + gap / 2;
  const root = svg("svg", {
    xmlns: SVG_NS, viewBox: `0 0 ${width} ${height}`, width: "100%", class: "cw-bars",
    style: `max-width:${width}px`, role: "img", "aria-label": ariaLabel,
  });
  rows.forEach((row, i) => {
    const y = gap / 2 + i * (barHeight + gap);
    const g = svg("g", { class: "cw-bar-row", "data-row": row.key ?? row.label ?? i });
    if (labelWidth) {
      g.append(svg("text", { x: labelWidth - 6, y: y + barHeight / 2 + 4, "text-anchor": "end", class: "cw-svg-text" },
        row.label ?? ""));
    }
    let x = labelWidth + 1;
    for (const seg of row.segments) {
      const w = Math.max(seg.value, 0) * scale;
      if (w <= 0) continue;
      g.append(svg("rect", {
        x: x.toFixed(2), y, width: w.toFixed(2), height: barHeight, fill: seg.color,
        stroke: seg.outline ? "#fff" : undefined, "stroke-width": seg.outline ? 1 : undefined,
        "data-part": seg.part,
      }, seg.title ? svg("title", {}, seg.title) : null));
      x += w;
    }
    if (row.note) {
      const noteX = noteWidth ? width - noteWidth + 4 : Math.min(x + 4, width - 4);
      g.append(svg("text", {
        x: noteX.toFixed(2), y: y + barHeight / 2 + 4, class: "cw-svg-text cw-bar-note",
        "text-anchor": noteWidth || x + 4 < width - 60 ? "start" : "end",
      }, row.note));
    }
    root.append(g);
  });
  if (marker) {
    const mx = labelWidth + 1 + marker * scale;
    root.append(svg("line", {
      x1: mx.toFixed(2), y1: 1, x2: mx.toFixed(2), y2: height - 1, stroke: "currentColor", "stroke-width": 2,
      class: "cw-marker",
    }));
  }
  return root;
}

/** Round tick values from 0 to the first one at or above `top`: about `count` steps of 1, 2 or
 * 5 times a power of ten. */
export function niceTicks(top, count = 5) {
  if (!(top > 0)) return [0];
  const raw = top / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const ticks = [0];
  for (let i = 1; ticks[ticks.length - 1] < top; i += 1) ticks.push(Number((i * step).toPrecision(12)));
  return ticks;
}

/** A line chart of series over shared x positions, with a vertical line at x = `at`.
 *
 * x: Numbers; series: [{label, color, values}]; at: the x value to mark (or undefined). */
export function lineChart({ x, series, at, width = 640, height = 220, xLabel = "", yLabel = "",
  format = (v) => formatInt(Math.round(v)), ariaLabel = "" }) {
  const left = 64;
  const right = 12;
  const top = 10;
  const bottom = 38;
  const xs = x.map(Number);
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs);
  const yTop = Math.max(1, ...series.flatMap((s) => s.values.map(Number)));
  const ticks = niceTicks(yTop);
  const yMax = ticks[ticks.length - 1];
  const px = (v) => left + (x1 === x0 ? 0 : ((v - x0) / (x1 - x0)) * (width - left - right));
  const py = (v) => height - bottom - (v / yMax) * (height - top - bottom);
  const root = svg("svg", {
    xmlns: SVG_NS, viewBox: `0 0 ${width} ${height}`, width: "100%", class: "cw-line-chart",
    style: `max-width:${width}px`, role: "img", "aria-label": ariaLabel,
  });
  for (const t of ticks) {
    root.append(svg("line", { x1: left, x2: width - right, y1: py(t), y2: py(t), class: "cw-grid" }));
    root.append(svg("text", { x: left - 6, y: py(t) + 4, "text-anchor": "end", class: "cw-svg-text cw-small" }, format(t)));
  }
  for (const t of [x0, ...niceTicks(x1, 8).filter((v) => v > x0 + (x1 - x0) / 16 && v <= x1)]) {
    root.append(svg("text", { x: px(t), y: height - bottom + 16, "text-anchor": "middle", class: "cw-svg-text cw-small" },
      formatInt(Math.round(t))));
  }
  root.append(svg("text", { x: (left + width - right) / 2, y: height - 4, "text-anchor": "middle", class: "cw-svg-text" }, xLabel));
  if (yLabel) {
    root.append(svg("text", { x: 12, y: top + (height - top - bottom) / 2, class: "cw-svg-text", "text-anchor": "middle",
      transform: `rotate(-90 12 ${top + (height - top - bottom) / 2})` }, yLabel));
  }
  for (const s of series) {
    const points = xs.map((v, i) => `${px(v).toFixed(2)},${py(Number(s.values[i])).toFixed(2)}`).join(" ");
    root.append(svg("polyline", { points, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.key ?? s.label },
      svg("title", {}, s.label)));
  }
  if (at !== undefined) {
    const mx = px(Number(at));
    root.append(svg("line", { x1: mx, x2: mx, y1: top, y2: height - bottom, class: "cw-marker", stroke: "currentColor",
      "stroke-dasharray": "4 3" }));
    for (const s of series) {
      const i = xs.indexOf(Number(at));
      if (i >= 0) {
        root.append(svg("circle", { cx: mx, cy: py(Number(s.values[i])), r: 3.5, fill: s.color }));
      }
    }
  }
  return root;
}
