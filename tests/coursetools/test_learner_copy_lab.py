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

import itertools
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from coursetools.lab_chapters import GLUE_ROLE, _format_plain, built_notebook
from lab_server import QUIET, jupyterlab
from test_learner_copy import _fill_answers

ROOT = Path(__file__).resolve().parents[2]

CHAPTERS = ("01_attention_by_hand", "02_decode_step", "05_batches", "09_ga2_machine")
CHROMIUM = os.environ.get("KVCOURSE_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 240_000

# Run All as the learner's menu runs it, its promise kept: it settles when the run ends, with true when
# every cell ran, false when one failed (or the kernel died), so a failure is reported at once with
# its output rather than waited out.
RUN_ALL_JS = r"""
() => {
  window.kvcourseRunAll = null;
  jupyterapp.commands.execute('notebook:run-all-cells').then(
    ok => { window.kvcourseRunAll = {ok: ok}; },
    err => { window.kvcourseRunAll = {ok: false, error: String(err)}; });
}
"""
RUN_STATE_JS = r"""
() => {
  const panel = jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return {notebook: panel.title.label, ran: window.kvcourseRunAll, kernel: kernel ? kernel.status : 'none',
          cells: cells.length,
          no_count: cells.map((c, i) => [i, c.promptNode ? c.promptNode.textContent : '', c.model.sharedModel.source.slice(0, 60)])
                        .filter((_, i) => cells[i].model.executionCount === null),
          dialogs: Array.from(document.querySelectorAll('.jp-Dialog')).map(d => d.innerText)};
}
"""
OUTPUTS_JS = r"""
() => jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')
  .flatMap(c => { const out = []; for (let i = 0; i < c.model.outputs.length; i++) out.push(c.model.outputs.get(i).toJSON()); return out; })
"""
KERNEL_JS = ("() => window.jupyterapp && jupyterapp.shell.currentWidget && jupyterapp.shell.currentWidget.sessionContext"
             " && jupyterapp.shell.currentWidget.sessionContext.session"
             " && jupyterapp.shell.currentWidget.sessionContext.session.kernel")


@pytest.fixture(scope="module")
def copy_lab_server(learner_copy, tmp_path_factory):
    """(the copy, JupyterLab's base URL): the copy's own JupyterLab, every notebook rendered at
    once (no windowing, so the page holds every cell's text), one for this file's tests (starting
    it is most of a test's set-up); stopped afterwards."""
    copy, python = learner_copy
    settings = QUIET | {"notebook-extension/tracker": {"windowingMode": "none"}}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MPLBACKEND", "JUPYTER_PATH")}
    with jupyterlab(python, copy, tmp_path_factory.mktemp("copy-lab"), env, 90, settings) as (base, _):
        yield copy, base


def _stop_every_kernel(base: str) -> None:
    """Every session and kernel of the server ended, as a test that stops part-way leaves them."""
    for what in ("sessions", "kernels"):
        with urllib.request.urlopen(base + f"api/{what}", timeout=30) as answer:
            running = json.load(answer)
        for item in running:
            request = urllib.request.Request(base + f"api/{what}/{item['id']}", method="DELETE")
            try:
                urllib.request.urlopen(request, timeout=60).close()
            except urllib.error.HTTPError as error:
                if error.code != 404:               # gone with its session already
                    raise


@pytest.fixture
def copy_lab(copy_lab_server):
    """(the copy, JupyterLab's base URL): the shared server, on exercises as handed out (nothing
    written yet, whatever the test before wrote) and no kernel left from the test before."""
    copy, base = copy_lab_server
    _stop_every_kernel(base)
    shutil.rmtree(copy / "exercises")
    shutil.copytree(copy.parent / "exercises-as-handed-out", copy / "exercises")     # nothing written yet
    yield copy, base
    _stop_every_kernel(base)


@pytest.fixture(scope="module")
def copy_lab_browser(playwright_driver):
    browser = playwright_driver.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def page(copy_lab_browser):
    """A tab in a browser context of its own (nothing of the test before: storage, cookies, pages)."""
    context = copy_lab_browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        tab = context.new_page()
        tab.on("dialog", lambda dialog: dialog.accept())      # leaving a notebook with unsaved outputs
        yield tab
    finally:
        context.close()


_WORKSPACES = itertools.count()


def _open(page, base: str, name: str) -> None:
    """The chapter alone in a workspace of its own, its kernel started.  A fresh workspace each time:
    the default one would reopen the chapters opened before, whose kernels, started beside this one,
    leave its session for a moment with none (and Run All then asks which kernel to use)."""
    workspace = f"chapter-{next(_WORKSPACES)}"
    page.goto(base + f"lab/workspaces/{workspace}/tree/book/chapters/{name}.ipynb?reset", wait_until="load",
              timeout=TIMEOUT_MS)
    page.wait_for_function(KERNEL_JS, timeout=TIMEOUT_MS)
    page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.ready")
    page.wait_for_function("() => document.querySelectorAll('.jp-MarkdownCell').length > 3 && "
                           "document.querySelector('.jp-MarkdownCell h1')", timeout=TIMEOUT_MS)
    time.sleep(2)                       # the MyST renderer's last cells


def _run_all(page) -> list[dict]:
    """Run All, waited for until it settles; the cells' outputs.  A run that does not settle fails
    with the kernel's state, any dialog open and the cells with no execution count."""
    page.wait_for_function(KERNEL_JS, timeout=TIMEOUT_MS)
    page.evaluate(RUN_ALL_JS)
    try:
        page.wait_for_function("() => window.kvcourseRunAll !== null", timeout=TIMEOUT_MS, polling=500)
    except Exception as error:                           # playwright's TimeoutError
        page.screenshot(path=str(ROOT / "_build" / "screenshots" / "copy_lab__run_all_unsettled.png"))
        raise AssertionError(f"Run All did not settle: {page.evaluate(RUN_STATE_JS)}") from error
    state = page.evaluate(RUN_STATE_JS)
    outputs = page.evaluate(OUTPUTS_JS)
    if not state["ran"]["ok"]:
        errors = [(o["ename"], o["evalue"]) for o in outputs if o["output_type"] == "error"]
        raise AssertionError(f"Run All stopped: {state}; errors: {errors}; said: {_said(outputs)[-2000:]}")
    return outputs


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


def test_the_copys_readme_opens_rendered(copy_lab, page, screenshots_dir):
    """The README, opened in the copy's JupyterLab, shows as a page (the settings the README's
    set-up copies into the venv make a Markdown file open in its preview), not as its source."""
    copy, base = copy_lab
    page.goto(base + "lab/tree/README.md", wait_until="load", timeout=TIMEOUT_MS)
    page.wait_for_function("() => window.jupyterapp && jupyterapp.shell.currentWidget && "
                           "jupyterapp.shell.currentWidget.title.label === 'README.md' && "
                           "jupyterapp.shell.currentWidget.node.querySelector('h2')",
                           timeout=TIMEOUT_MS)
    widget = "jupyterapp.shell.currentWidget.node"
    assert page.evaluate(f"() => {widget}.querySelector('.jp-FileEditor, .cm-editor')") is None, (
        "the README opened as source")
    title = page.evaluate(f"() => {widget}.querySelector('h1').textContent").replace("\u2019", "'")
    assert title.startswith("The KV cache course: the learner's copy"), title
    text = page.evaluate(f"() => {widget}.innerText")
    assert "How to hand in" in text and "## " not in text and "```" not in text
    page.screenshot(path=str(screenshots_dir / "copy_lab__README.png"), full_page=False)


def test_a_saved_answer_that_fails_its_public_checks_is_named_before_the_chapter_uses_it(copy_lab, page,
                                                                                         screenshots_dir):
    """Every exercise written and saved, ``attend_step`` without its division by sqrt(d) (it fails
    a public check): chapter 2, run in the copy's JupyterLab, says in its first paragraph that
    attend_step fails some of its public checks and that the chapter uses it as written, in bold in
    view, before any cell uses it; then the chapter still runs to its end."""
    copy, base = copy_lab
    for path in (copy / "exercises").glob("*.ipynb"):
        _fill_answers(path, ROOT / "solutions" / path.name)
    exercise = copy / "exercises" / "attend_step.ipynb"
    nb = json.loads(exercise.read_text())
    answer = next(c for c in nb["cells"] if "answer" in c["metadata"].get("tags", []))
    source = "".join(answer["source"])
    assert source.count(" / np.sqrt(q.shape[0])") == 1
    answer["source"] = source.replace(" / np.sqrt(q.shape[0])", "")         # scores not scaled
    exercise.write_text(json.dumps(nb, indent=1))
    _open(page, base, "02_decode_step")
    outputs = _run_all(page)
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, [(o["ename"], o["evalue"]) for o in errors]
    texts = [_said([o]) for o in outputs]
    at = next((k for k, text in enumerate(texts) if text.startswith("This chapter runs on")), None)
    assert at is not None, _said(outputs)[:1500]
    first, said = texts[at], _said(outputs)
    uses = [k for k, text in enumerate(texts) if "largest relative difference" in text]   # the decode vs prefill figure
    assert uses and at < min(uses), "the chapter used attend_step before saying it fails its checks"
    found = re.search(r"attend_step \(exercises/attend_step\.ipynb: saved [^,]+, fails (\d+) of its (\d+) public "
                      r"checks\)", first)
    assert found and 0 < int(found[1]) < int(found[2]), said[:1500]
    assert "The chapter uses attend_step as written" in first
    assert re.search(r"softmax \(exercises/softmax\.ipynb: saved [^,]+, passes its \d+ public checks\)", first)
    bold = page.evaluate("() => Array.from(jupyterapp.shell.currentWidget.content.node"
                         ".querySelectorAll('.jp-OutputArea strong')).map(e => e.innerText)")
    assert any(re.fullmatch(r"fails \d+ of its \d+ public checks", b) for b in bold), bold
    page.locator(".jp-OutputArea strong").first.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots_dir / "copy_lab__02_decode_step__failing_answer.png"), full_page=False)
    page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.shutdown()")


@pytest.fixture(scope="session")
def screenshots_dir() -> Path:
    path = ROOT / "_build" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path
