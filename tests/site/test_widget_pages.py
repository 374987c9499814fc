"""Widgets no chapter shows yet, on offline pages drawn by the site's host (coursebook.widgets.save_page).

* SeriesExplorer, the piece a chapter uses for "cost against context length": its slider and its
  choice redraw the bars, the tables, the ratios and the line chart, and the page says exactly
  what ``SeriesExplorer.summary()`` says at every position;
* every control on such a page passes the site test's generic check (controls.exercise_controls);
* the host: two views of one widget stay in step; a module whose default export is a function,
  with an ``initialize``, runs as anywidget runs it; a widget that needs a kernel (an ipywidgets
  slider) and a module that throws get a notice in the page and an error in the console, which
  the site test would report.
"""
from __future__ import annotations

import ipywidgets
import numpy as np
import pytest
import traitlets

from coursebook.widgets import CourseWidget, SeriesExplorer, save_page
from controls import exercise_controls
from watched import settle, watched_page

READ_JS = r"""
(index) => {
  const w = document.querySelectorAll('.cw-series')[index];
  const table = name => Array.from(w.querySelectorAll(`table[data-table="${name}"] tbody tr`))
    .map(tr => Array.from(tr.cells).map(td => td.textContent));
  const ratio = name => { const p = w.querySelector(`[data-ratio="${name}"] b`); return p ? p.textContent : null; };
  return {
    step: table('step'), generation: table('generation'),
    ratio: {step: ratio('step'), generation: ratio('generation')},
    headings: Array.from(w.querySelectorAll('.cw-heading')).map(e => e.textContent),
    slider: w.querySelector('input[type=range]').value,
    shownValue: w.querySelector('output').textContent,
    choice: w.querySelector('select').value,
    bars: Array.from(w.querySelectorAll('[data-panel="step"] g.cw-bar-row')).map(g => g.getAttribute('data-row')),
    partsDrawn: w.querySelectorAll('[data-panel="step"] rect[data-part]').length,
    lines: Array.from(w.querySelectorAll('polyline[data-series]')).map(p => p.getAttribute('data-series')),
    dots: w.querySelectorAll('[data-panel="lines"] circle').length,
    text: w.innerText,
  };
}
"""


def cost_curves():
    """Data shaped as the GA-2 chapter's will be: two programs, three units, L = 1 ... 64."""
    L = np.arange(1, 65)
    return L, {
        "cached": {"matrix": 1400 + 6 * L, "DMA": 850 + 4 * L, "vector": 120 + 3 * L},
        "recompute": {"matrix": 1400 + 2 * L * L, "DMA": 800 + 40 * L, "vector": 120 + 3 * L},
    }


@pytest.fixture
def explorer_page(scratch_site):
    folder, url = scratch_site
    L, series = cost_curves()
    w = SeriesExplorer(L, series, x_label="context length L", unit="cycles", ratio=("recompute", "cached"),
                       value=32)
    save_page(folder / "series.html", w, title="Cycles against context length")
    return w, url


def expect(page, w, index=0):
    shown = page.evaluate(READ_JS, index)
    s = w.summary()
    assert shown["step"] == s["step"] and shown["generation"] == s["generation"]
    assert shown["ratio"] == s["ratio"]
    assert shown["shownValue"] == f"{w.value:,}" and shown["choice"] == w.choice
    assert shown["headings"] == [f"At context length L = {w.value}", f"Summed over context length L = 1 ... {w.value}"]
    assert shown["bars"] == w.shown() and shown["lines"] == w.shown() and shown["dots"] == len(w.shown())
    assert shown["partsDrawn"] == 3 * len(w.shown())
    for bad in ("NaN", "undefined", "Infinity"):
        assert bad not in shown["text"]
    return shown


def test_the_slider_and_the_choice_redraw_what_python_computes(explorer_page, browser):
    w, url = explorer_page
    with watched_page(browser, url, "series.html") as (page, problems):
        expect(page, w)
        slider = page.locator(".cw-series input[type=range]")
        slider.focus()
        for key, value in (("Home", 1), ("ArrowRight", 2), ("ArrowRight", 3), ("End", 64), ("ArrowLeft", 63),
                           ("PageDown", None)):
            slider.press(key)
            settle(page)
            w.value = int(page.evaluate(READ_JS, 0)["shownValue"].replace(",", "")) if value is None else value
            expect(page, w)
        for choice in ("cached", "recompute", "all"):
            page.locator(".cw-series select").select_option(choice)
            settle(page)
            w.choice = choice
            expect(page, w)
        # at L = 64 the generation's cost is the sum of every step (summed here with numpy)
        slider.press("End")
        settle(page)
        shown = page.evaluate(READ_JS, 0)
        L, series = cost_curves()
        total = {n: int(sum(np.sum(v) for v in parts.values())) for n, parts in series.items()}
        assert [row[-1] for row in shown["generation"]] == [f"{total['cached']:,} cycles",
                                                            f"{total['recompute']:,} cycles"]
        assert shown["ratio"]["generation"] == f"{total['recompute'] / total['cached']:.2f}"
    assert not problems, problems


def test_every_control_of_the_explorer_is_alive(explorer_page, browser):
    w, url = explorer_page
    with watched_page(browser, url, "series.html") as (page, problems):
        report = exercise_controls(page)
    assert len(report["controls"]) == 2, report
    assert not report["dead"] and not report["bad_text"], report
    assert not problems, problems


def test_two_views_of_one_widget_stay_in_step(scratch_site, browser):
    folder, url = scratch_site
    L, series = cost_curves()
    w = SeriesExplorer(L, series, value=8)
    save_page(folder / "twice.html", w, w)
    with watched_page(browser, url, "twice.html") as (page, problems):
        page.locator(".cw-series select").first.select_option("cached")
        page.locator(".cw-series input[type=range]").first.focus()
        page.locator(".cw-series input[type=range]").first.press("End")
        settle(page)
        first, second = page.evaluate(READ_JS, 0), page.evaluate(READ_JS, 1)
    assert first["choice"] == second["choice"] == "cached"
    assert first["slider"] == second["slider"] == "63" and first["step"] == second["step"]
    assert not problems, problems


def test_a_module_with_a_factory_and_initialize_runs_as_in_jupyterlab(scratch_site, browser, tmp_path):
    (tmp_path / "counter.js").write_text(
        'import { h, button } from "course-widgets";\n'
        "export default async () => {\n"
        "  const calls = [];\n"
        "  return {\n"
        "    initialize({ model }) { calls.push('initialize'); model.set('count', model.get('count') + 100); },\n"
        "    render({ model, el }) {\n"
        "      calls.push('render');\n"
        "      const out = h('p', { class: 'count' });\n"
        "      const show = () => { out.textContent = `${model.get('count')} after ${calls.join(', ')}`; };\n"
        "      model.on('change:count', show);\n"
        "      el.append(button({ label: 'add one', name: 'add', onClick: () => {\n"
        "        model.set('count', model.get('count') + 1); model.save_changes(); } }), out);\n"
        "      show();\n"
        "    },\n"
        "  };\n"
        "};\n")

    class Counter(CourseWidget):
        _module = tmp_path / "counter.js"
        count = traitlets.Int(5).tag(sync=True)

    folder, url = scratch_site
    save_page(folder / "counter.html", Counter())
    with watched_page(browser, url, "counter.html") as (page, problems):
        assert page.locator(".count").text_content() == "105 after initialize, render"
        page.locator("button[data-control=add]").click()
        assert page.locator(".count").text_content() == "106 after initialize, render"
        report = exercise_controls(page)
        assert report["controls"] and not report["dead"]
    assert not problems, problems


def test_a_widget_that_needs_a_kernel_is_reported(scratch_site, browser):
    folder, url = scratch_site
    save_page(folder / "ipywidgets.html", ipywidgets.IntSlider(value=3, description="dead"))
    with watched_page(browser, url, "ipywidgets.html") as (page, problems):
        notice = page.locator(".cw-host-notice").text_content()
    assert "needs a running Python kernel" in notice and "IntSliderModel" in notice
    assert any("needs a Python kernel" in p and p.startswith("console error") for p in problems), problems


def test_a_module_that_throws_is_reported(scratch_site, browser, tmp_path):
    (tmp_path / "broken.js").write_text("export default { render() { throw new Error('the data is missing'); } };\n")

    class Broken(CourseWidget):
        _module = tmp_path / "broken.js"

    folder, url = scratch_site
    save_page(folder / "broken.html", Broken())
    with watched_page(browser, url, "broken.html") as (page, problems):
        notice = page.locator(".cw-host-notice").text_content()
        error = page.locator(".cw-host").get_attribute("data-widget-error")
    assert "could not start: the data is missing" in notice and error == "the data is missing"
    assert any("failed" in p and p.startswith("console error") for p in problems), problems
