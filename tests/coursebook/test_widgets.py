"""coursebook.widgets on the Python side: module bundling, the base class, SeriesExplorer's data
and what it says it shows, and the offline page.  The browser side is tested in
tests/site/test_widget_pages.py and tests/site/test_widget_library.py."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import traitlets

from coursebook.widgets import CourseWidget, SeriesExplorer, WidgetModuleError, bundle, library_exports, save_page
from coursebook.widgets.module import LIBRARY


def write(tmp_path, text, name="w.js"):
    path = tmp_path / name
    path.write_text(text)
    return path


# -- bundling -------------------------------------------------------------------------------------

def test_bundle_inlines_the_library_and_binds_only_the_imported_names(tmp_path):
    path = write(tmp_path, 'import { h, formatInt } from "course-widgets";\n'
                           'export default { render({ model, el }) { el.append(h("p", {}, formatInt(5))); } };\n')
    text = bundle(path)
    assert text.startswith("// course-widgets, inlined")
    assert "const { h, formatInt } = (() => {" in text
    assert "import {" not in text.split("})();", 1)[1], "the import line is gone"
    assert "\nexport function" not in text, "the library's exports become local functions"
    assert text.rstrip().endswith("export default { render({ model, el }) { el.append(h(\"p\", {}, formatInt(5))); } };")
    body = LIBRARY.read_text()
    assert len(text) > len(body)


def test_a_module_without_imports_is_sent_as_it_is(tmp_path):
    source = "export default { render({ el }) { el.textContent = 'hi'; } };\n"
    assert bundle(write(tmp_path, source)) == source


def test_library_exports_are_the_documented_pieces():
    names = library_exports()
    for name in ("h", "svg", "field", "choice", "toggle", "slider", "button", "messageArea", "stackedBars",
                 "lineChart", "legend", "formatInt", "fixed", "roundHalfEven", "ratioText", "parseWhole",
                 "parseAmount", "groupDigits", "niceTicks"):
        assert name in names
    assert len(names) == len(set(names))


@pytest.mark.parametrize("source, words", [
    ('import { h } from "./library.js";\n', "may import only from 'course-widgets'"),
    ('import * as lib from "course-widgets";\n', "may import only"),
    ('const m = await import("./other.js");\n', "may import only"),
    ('import { h as make } from "course-widgets";\n', "no 'as'"),
    ('import { nothing } from "course-widgets";\n', "has no nothing"),
    ('export { h } from "course-widgets";\n', "may import only"),
    ('const data = fetch("/data.json");\n', "must not reach the network"),
    ('const src = "https://cdn.example.org/d3.js";\n', "must not reach the network"),
    ('const ws = new WebSocket("ws://127.0.0.1");\n', "must not reach the network"),
    ('el.innerHTML = "<script>x</script>";\n', "'</script'"),
    ('el.innerHTML = "<!-- note -->";\n', "'<!--'"),
])
def test_bundle_refuses_what_would_not_work_offline(tmp_path, source, words):
    with pytest.raises(WidgetModuleError, match=re.escape(words)):
        bundle(write(tmp_path, source + "export default {};\n"))


def test_a_course_widget_carries_its_module_and_styles(tmp_path):
    write(tmp_path, 'import { h } from "course-widgets";\nexport default { render({ el }) { el.append(h("b")); } };\n',
          "meter.js")
    (tmp_path / "meter.css").write_text(".meter { color: red; }\n")

    class Meter(CourseWidget):
        _module = tmp_path / "meter.js"
        _stylesheet = tmp_path / "meter.css"
        level = traitlets.Int(3).tag(sync=True)

    m = Meter()
    state = m.get_state()
    assert state["_esm"] == Meter._esm and "const { h } = (() => {" in state["_esm"]
    assert state["_css"].startswith("/* course-widgets") and state["_css"].rstrip().endswith(".meter { color: red; }")
    assert state["_anywidget_id"].endswith(".Meter") and state["level"] == 3
    assert repr(m) == "Meter(level=3)"


# -- SeriesExplorer -------------------------------------------------------------------------------

def example():
    rng = np.random.default_rng(5)
    x = list(range(1, 17))
    series = {name: {part: [int(v) for v in rng.integers(0, 500, size=len(x))] for part in ("matrix", "DMA", "vector")}
              for name in ("cached", "recompute")}
    return x, series


def test_series_explorer_says_what_it_shows():
    x, series = example()
    w = SeriesExplorer(x, series, x_label="L", unit="cycles", ratio=("recompute", "cached"), value=9)
    arrays = {n: np.array([series[n][p] for p in ("matrix", "DMA", "vector")]) for n in series}   # parts x positions
    i = x.index(9)
    for name, a in arrays.items():
        assert w.at()[name] == {"matrix": a[0, i], "DMA": a[1, i], "vector": a[2, i], "total": a[:, i].sum()}
        sums = a.cumsum(axis=1)[:, i]
        assert w.generation()[name] == {"matrix": sums[0], "DMA": sums[1], "vector": sums[2], "total": sums.sum()}
    r, c = arrays["recompute"], arrays["cached"]
    assert w.ratios() == {"step": r[:, i].sum() / c[:, i].sum(),
                          "generation": r[:, : i + 1].sum() / c[:, : i + 1].sum()}
    s = w.summary()
    assert s["step"][0] == ["cached", f"{c[0, i]:,}", f"{c[1, i]:,}", f"{c[2, i]:,}", f"{c[:, i].sum():,} cycles"]
    assert s["ratio"]["step"] == f"{r[:, i].sum() / c[:, i].sum():.2f}"
    w.choice = "recompute"
    assert [row[0] for row in w.summary()["step"]] == ["recompute"]
    w.value = 16
    assert w.summary()["generation"][0][-1] == f"{r.sum():,} cycles"


def test_series_explorer_data_reaches_the_browser_whole():
    x, series = example()
    w = SeriesExplorer(x, series, labels={"cached": "with the cache"}, colours={"DMA": "#000000"})
    d = w.get_state()["data"]
    assert d["x"] == x and d["values"] == series and d["parts"] == ["matrix", "DMA", "vector"]
    assert d["labels"] == {"cached": "with the cache", "recompute": "recompute"} and d["all_label"] == "both"
    assert d["part_colours"]["DMA"] == "#000000" and d["ratio"] is None
    assert w.value == 16 and w.choice == "all"
    json.dumps(d)   # plain JSON


def test_series_explorer_takes_numpy_and_whole_floats():
    w = SeriesExplorer(np.arange(1, 4), {"a": {"p": np.array([1, 2, 3]), "q": [1.0, 2.0, 3.0]}})
    assert w.get_state()["data"]["values"] == {"a": {"p": [1, 2, 3], "q": [1, 2, 3]}}


@pytest.mark.parametrize("x, series, kwargs, words", [
    ([], {"a": {"p": []}}, {}, "x is empty"),
    ([1, 1, 2], {"a": {"p": [1, 2, 3]}}, {}, "increase strictly"),
    ([1, 2], {}, {}, "series is empty"),
    ([1, 2], {"all": {"p": [1, 2]}}, {}, "'all' names the choice"),
    ([1, 2], {"a": {}}, {}, "at least one part"),
    ([1, 2], {"a": {"p": [1, 2]}, "b": {"q": [1, 2]}}, {}, "every series needs ['p']"),
    ([1, 2], {"a": {"p": [1]}}, {}, "1 values for 2 positions"),
    ([1, 2], {"a": {"p": [1, -2]}}, {}, "negative value"),
    ([1, 2], {"a": {"p": [1, 2.5]}}, {}, "2.5 is not a whole number"),
    ([1, 2], {"a": {"p": [1, "2"]}}, {}, "'2' is not a whole number"),
    ([1, 2], {"a": {"p": [2**52, 2**52]}}, {}, "2**53"),
    ([1, 2], {"a": {"p": [1, 2]}}, {"ratio": ("a", "b")}, "ratio names two series"),
])
def test_series_explorer_refuses_bad_data(x, series, kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        SeriesExplorer(x, series, **kwargs)


def test_series_explorer_refuses_a_value_off_the_scale():
    w = SeriesExplorer([2, 4, 8], {"a": {"p": [1, 2, 3]}}, value=4)
    with pytest.raises(traitlets.TraitError, match="one of x"):
        w.value = 5
    with pytest.raises(traitlets.TraitError, match="choice must be one of"):
        w.choice = "b"
    assert (w.value, w.choice) == (4, "all")


def test_ratio_over_zero_is_said_not_divided():
    w = SeriesExplorer([1, 2], {"a": {"p": [1, 2]}, "b": {"p": [0, 3]}}, ratio=("a", "b"), value=1)
    assert w.ratios()["step"] is None and w.summary()["ratio"]["step"] == "n/a"
    assert w.summary()["ratio"]["generation"] == "n/a"


# -- the offline page -----------------------------------------------------------------------------

def test_save_page_writes_the_state_the_views_and_the_host(tmp_path):
    x, series = example()
    w = SeriesExplorer(x, series)
    path = save_page(tmp_path / "page.html", w, w, title="Two views <of one>")
    html = path.read_text()
    assert "<title>Two views &lt;of one&gt;</title>" in html
    state = json.loads(re.search(r'widget-state\+json">(.*?)</script>', html, re.S).group(1))
    assert w.model_id in state["state"] and state["state"][w.model_id]["state"]["_esm"] == SeriesExplorer._esm
    views = re.findall(r'<div class="cell_output"><script type="application/vnd.jupyter.widget-view\+json">(.*?)</script>',
                       html)
    assert [json.loads(v)["model_id"] for v in views] == [w.model_id, w.model_id]
    assert "STATE_TYPE" in html and "src=" not in html, "the host is inlined: the page loads nothing"
    with pytest.raises(ValueError, match="at least one widget"):
        save_page(tmp_path / "empty.html")


# -- the documented example -----------------------------------------------------------------------

def test_the_contributing_example_builds_the_cycles_widget():
    """CONTRIBUTING.md's example (the GA-2 chapter's widget) runs, and shows the cycle model's totals."""
    from pathlib import Path

    from ga2.attn import default_params, program
    from ga2.cycles import cycle_counts

    text = (Path(__file__).resolve().parents[2] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text[text.index("### Example: cycles against context length"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "CONTRIBUTING.md", "exec"), scope)
    cycles = scope["cycles"]
    assert isinstance(cycles, SeriesExplorer) and cycles.value == 32
    for L in (1, 32, 64):
        for variant in ("cached", "recompute"):
            assert cycles.at(L)[variant]["total"] == cycle_counts(program(L, variant, default_params(),
                                                                          beyond_plan=True)).total
    step = cycles.at(32)
    assert cycles.ratios(32)["step"] == step["recompute"]["total"] / step["cached"]["total"] > 1
