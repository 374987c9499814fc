"""The learner's copy in its own JupyterLab, in Chromium: chapters 1, 2, 5 and 9 as a learner meets them.

JupyterLab runs from the copy's venv (made by the commands of its README, the ``learner_copy``
fixture: with the MyST renderer the copy asks for), on the copy's folder, and Chromium opens each
chapter:

* before anything runs, the text reads as on the site: no ``{glue`` role and no ``:class:`` option
  in view, every glued figure the chapter states shown as the site shows it (the build's values);
* as handed out (no exercise written), Run All reaches the last cell: no error output, and a cell
  that needs an answer not written says so in one line;
* with every exercise written (the reference answers in the answer cells) and saved, every cell
  runs and none says it needs an answer.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from coursetools.lab_chapters import GLUE_ROLE, _format_plain, built_notebook
from lab_server import QUIET, jupyterlab
from test_learner_copy import _fill_answers

ROOT = Path(__file__).resolve().parents[2]

CHAPTERS = ("01_attention_by_hand", "02_decode_step", "05_batches", "09_ga2_machine")
CHROMIUM = os.environ.get("KVCOURSE_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 240_000

ALL_RAN_JS = r"""
() => {
  const panel = jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return kernel && kernel.status === 'idle' && cells.length > 0 && cells.every(c => c.model.executionCount !== null);
}
"""
OUTPUTS_JS = r"""
() => jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')
  .flatMap(c => { const out = []; for (let i = 0; i < c.model.outputs.length; i++) out.push(c.model.outputs.get(i).toJSON()); return out; })
"""
KERNEL_JS = ("() => window.jupyterapp && jupyterapp.shell.currentWidget && jupyterapp.shell.currentWidget.sessionContext"
             " && jupyterapp.shell.currentWidget.sessionContext.session"
             " && jupyterapp.shell.currentWidget.sessionContext.session.kernel")


@pytest.fixture
def copy_lab(learner_copy, tmp_path):
    """(the copy, JupyterLab's base URL): the copy's own JupyterLab, every notebook rendered at
    once (no windowing, so the page holds every cell's text); stopped afterwards."""
    copy, python = learner_copy
    shutil.rmtree(copy / "exercises")
    shutil.copytree(copy.parent / "exercises-as-handed-out", copy / "exercises")     # nothing written yet
    settings = QUIET | {"notebook-extension/tracker": {"windowingMode": "none"}}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MPLBACKEND", "JUPYTER_PATH")}
    with jupyterlab(python, copy, tmp_path, env, 90, settings) as (base, _):
        yield copy, base


@pytest.fixture
def page(tmp_path, playwright_driver):
    browser = playwright_driver.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    try:
        yield browser.new_page(viewport={"width": 1280, "height": 900})
    finally:
        browser.close()


def _open(page, base: str, name: str) -> None:
    page.goto(base + f"lab/tree/book/chapters/{name}.ipynb", wait_until="load", timeout=TIMEOUT_MS)
    page.wait_for_function(KERNEL_JS, timeout=TIMEOUT_MS)
    page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.ready")
    page.wait_for_function("() => document.querySelectorAll('.jp-MarkdownCell').length > 3 && "
                           "document.querySelector('.jp-MarkdownCell h1')", timeout=TIMEOUT_MS)
    time.sleep(2)                       # the MyST renderer's last cells


def _run_all(page) -> list[dict]:
    page.evaluate("() => jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(ALL_RAN_JS, timeout=TIMEOUT_MS, polling=500)
    return page.evaluate(OUTPUTS_JS)


def _text(page, visible: bool = True) -> str:
    """The notebook's text in view (``innerText``), or all of it, a closed dropdown's too."""
    prop = "innerText" if visible else "textContent"
    return page.evaluate(f"() => jupyterapp.shell.currentWidget.content.node.{prop}")


def _figures(name: str) -> list[str]:
    """The text of every glued figure the chapter's Markdown states, from the build (the site's)."""
    source = json.loads((ROOT / "book" / "chapters" / f"{name}.ipynb").read_text())
    glue = json.loads(built_notebook(ROOT / "_build", Path(name + ".ipynb")).with_suffix(".glue.json").read_text())
    figures = []
    for cell in source["cells"]:
        for match in GLUE_ROLE.finditer("".join(cell["source"]) if cell["cell_type"] == "markdown" else ""):
            if match["kind"] != "md":
                figures.append(_format_plain(glue[match["key"]]["data"]["text/plain"], match["fmt"] or ""))
    return figures


def _said(outputs: list[dict]) -> str:
    return "\n".join(o.get("text", "") if o["output_type"] == "stream" else str(o.get("data", {}).get("text/plain", ""))
                     for o in outputs if o["output_type"] in ("stream", "display_data"))


def test_the_chapters_read_and_run_in_the_copys_jupyterlab(copy_lab, page, screenshots_dir):
    assert (ROOT / "_build" / "jupyter_execute" / "book" / "chapters").is_dir(), (
        "the copy's figures and outputs come from the book's build: run 'make book' first")
    copy, base = copy_lab
    for name in CHAPTERS:
        _open(page, base, name)
        text = _text(page)
        assert "{glue" not in text and ":class:" not in text, name
        shown = re.sub(r"\s+", " ", _text(page, visible=False))
        missing = [f for f in _figures(name) if re.sub(r"\s+", " ", f) not in shown]
        assert not missing, f"{name}: figures not in view: {missing[:5]}"
        outputs = _run_all(page)
        errors = [o for o in outputs if o["output_type"] == "error"]
        assert not errors, f"{name}: {[(o['ename'], o['evalue']) for o in errors]}"
        said = _said(outputs)
        needs = re.findall(r"This cell needs .*? \(exercises/(\w+)\.ipynb\), not written yet", said)
        assert needs, f"{name}: no cell said which answer it needs:\n{said[-2000:]}"
        assert "Traceback" not in said
        page.screenshot(path=str(screenshots_dir / f"copy_lab__{name}__as_handed_out.png"), full_page=False)
        page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    for path in (copy / "exercises").glob("*.ipynb"):                    # every answer written and saved
        _fill_answers(path, ROOT / "solutions" / path.name)
    for name in CHAPTERS:
        _open(page, base, name)
        outputs = _run_all(page)
        errors = [o for o in outputs if o["output_type"] == "error"]
        assert not errors, f"{name}: {[(o['ename'], o['evalue']) for o in errors]}"
        said = _said(outputs)
        assert "This cell needs" not in said and "passes its" in said, f"{name}:\n{said[:2000]}"
        page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.shutdown()")


@pytest.fixture(scope="session")
def screenshots_dir() -> Path:
    path = ROOT / "_build" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path
