// SeriesExplorer (coursebook/widgets/series.py): precomputed series over x, drawn in the
// browser.  The data trait holds every value; the slider (trait "value") and the choice (trait
// "choice") only pick what to draw, so nothing here needs a kernel.

import { h, choice, slider, stackedBars, legend, lineChart, formatInt, ratioText } from "course-widgets";

const ALL = "all";

function fill(template, values) {
  return template.replace(/\{(\w+)\}/g, (whole, key) => (key in values ? String(values[key]) : whole));
}

function render({ model, el }) {
  const d = model.get("data");
  const unit = d.unit ? ` ${d.unit}` : "";
  const count = d.x.length;

  // step[name][part][i] and upTo[name][part][i] (sums over positions 0..i), exact
  const step = {};
  const upTo = {};
  for (const name of d.names) {
    step[name] = {};
    upTo[name] = {};
    for (const part of d.parts) {
      const column = d.values[name][part].map(BigInt);
      let sum = 0n;
      step[name][part] = column;
      upTo[name][part] = column.map((v) => (sum += v));
    }
  }
  const total = (table, name, i) => d.parts.reduce((s, part) => s + table[name][part][i], 0n);
  const largest = (table) => Number(d.names.reduce((m, name) => {
    for (let i = 0; i < count; i += 1) {
      const t = total(table, name, i);
      if (t > m) m = t;
    }
    return m;
  }, 0n)) || 1;
  const stepMax = largest(step);
  const sumMax = largest(upTo);

  const position = () => Math.max(0, d.x.indexOf(model.get("value")));
  const shown = () => (model.get("choice") === ALL ? d.names : [model.get("choice")]);
  function commit(changes) {
    model.set(changes);
    model.save_changes();
  }

  const xSlider = slider({
    label: d.x_label, name: "value", count, position: position(), show: (p) => formatInt(d.x[p]),
    onInput: (p) => commit({ value: d.x[p] }),
  });
  const seriesChoice = choice({
    label: "show", name: "choice", value: model.get("choice"),
    options: [...d.names.map((n) => [d.labels[n], n]), [d.all_label, ALL]],
    onChange: (c) => commit({ choice: c }),
  });

  const stepTitle = h("p", { class: "cw-heading" });
  const stepFigure = h("div", { class: "cw-chart", "data-panel": "step" });
  const stepTable = h("table", { class: "cw-table", "data-table": "step" });
  const stepRatio = h("p", { class: "cw-ratio", "data-ratio": "step" });
  const sumTitle = h("p", { class: "cw-heading" });
  const sumFigure = h("div", { class: "cw-chart", "data-panel": "generation" });
  const sumTable = h("table", { class: "cw-table", "data-table": "generation" });
  const sumRatio = h("p", { class: "cw-ratio", "data-ratio": "generation" });
  const lines = h("div", { class: "cw-chart", "data-panel": "lines" });
  const partLegend = legend(d.parts.map((p) => ({ label: d.part_labels[p], color: d.part_colours[p] })));

  el.replaceChildren(h("div", { class: "cw-widget cw-series" },
    xSlider.element, seriesChoice.element,
    stepTitle, stepFigure, partLegend, stepTable, d.ratio ? stepRatio : null,
    d.cumulative ? [sumTitle, sumFigure, sumTable, d.ratio ? sumRatio : null] : null,
    lines));

  function bars(table, i, max) {
    const labelWidth = 12 + 7 * Math.max(...d.names.map((n) => d.labels[n].length));
    return stackedBars({
      rows: shown().map((name) => ({
        key: name, label: d.labels[name], note: `${formatInt(total(table, name, i))}${unit}`,
        segments: d.parts.map((part) => ({
          value: Number(table[name][part][i]), color: d.part_colours[part], part,
          title: `${d.part_labels[part]}: ${formatInt(table[name][part][i])}${unit}`,
        })),
      })),
      max, labelWidth, noteWidth: 150, width: 640, ariaLabel: `${d.x_label} = ${d.x[i]}`,
    });
  }

  function tableRows(target, table, i) {
    const head = h("tr", {}, h("th", {}, ""), d.parts.map((p) => h("th", { class: "cw-num" }, d.part_labels[p])),
      h("th", { class: "cw-num" }, "total"));
    const rows = shown().map((name) => h("tr", { "data-series": name },
      h("td", {}, d.labels[name]),
      d.parts.map((p) => h("td", { class: "cw-num" }, formatInt(table[name][p][i]))),
      h("td", { class: "cw-num" }, h("b", {}, `${formatInt(total(table, name, i))}${unit}`))));
    target.replaceChildren(h("thead", {}, head), h("tbody", {}, rows));
  }

  function ratioLine(target, table, i, where) {
    const [a, b] = d.ratio;
    const below = total(table, b, i);
    const value = below === 0n ? "n/a" : ratioText(total(table, a, i), below);
    target.replaceChildren(`${d.labels[a]} / ${d.labels[b]} ${where}: `, h("b", {}, value));
  }

  function redraw() {
    const i = position();
    const x = d.x[i];
    const words = { x_label: d.x_label, x: formatInt(x), first: formatInt(d.x[0]) };
    stepTitle.textContent = fill(d.step_title, words);
    stepFigure.replaceChildren(bars(step, i, stepMax));
    tableRows(stepTable, step, i);
    if (d.ratio) ratioLine(stepRatio, step, i, `at ${d.x_label} = ${formatInt(x)}`);
    if (d.cumulative) {
      sumTitle.textContent = fill(d.sum_title, words);
      sumFigure.replaceChildren(bars(upTo, i, sumMax));
      tableRows(sumTable, upTo, i);
      if (d.ratio) ratioLine(sumRatio, upTo, i, `summed up to ${d.x_label} = ${formatInt(x)}`);
    }
    lines.replaceChildren(lineChart({
      x: d.x, at: x, xLabel: d.x_label, yLabel: d.unit,
      series: shown().map((name) => ({
        key: name, label: d.labels[name], color: d.series_colours[name],
        values: d.x.map((_, j) => Number(total(step, name, j))),
      })),
      ariaLabel: `total per step over ${d.x_label}`,
    }), legend(shown().map((name) => ({ label: `${d.labels[name]}: total per step`, color: d.series_colours[name] }))));
  }

  function sync() {
    xSlider.set(position());
    seriesChoice.set(model.get("choice"));
    redraw();
  }
  model.on("change", sync);
  redraw();
  return () => model.off("change", sync);
}

export default { render };
