"""Chapter 3's calculator live in JupyterLab: the same module as on the site, with a kernel behind it.

The test starts JupyterLab headless from this environment (no token, a free loopback port, a
temporary root folder holding a copy of the chapter, settings and workspaces in a temporary
folder, news and update checks off), opens the chapter in Chromium, runs every cell, and then:

* types into the widget and reads the widget's new table;
* asks the kernel what ``calc`` holds: the typed value reached Python and ``calc.result``
  (lessons.memory) agrees with the page;
* sets a trait from the kernel (as a notebook cell does) and sees the widget redraw;
* presses the unit switch: Python reads the same numbers in the other unit, as the page does;
* types bad input: the widget says why, and Python keeps the last valid value.

No request may leave the loopback server and the console must stay free of errors, as on the
site.  It takes about 20 s here (JupyterLab's start and the chapter's cells).
"""
from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab_server import jupyterlab
from lessons.memory import kv_cache_bytes

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "book" / "chapters" / "03_cache_memory.ipynb"
#: The course's JupyterLab settings, as ``make lab`` and the learner's copy use them.
LAB_SETTINGS = ROOT / "tools" / "jupyterlab_settings"
START_TIMEOUT_S = 60
TIMEOUT_MS = 90_000

KERNEL_RUN_JS = r"""
async (code) => {
  const kernel = jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({code});
  let text = '';
  future.onIOPub = msg => {
    if (msg.header.msg_type === 'stream') text += msg.content.text;
    if (msg.header.msg_type === 'error') text += 'ERROR ' + msg.content.ename + ': ' + msg.content.evalue;
  };
  await future.done;
  return text;
}
"""

ALL_RAN_JS = r"""
() => {
  const panel = jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return kernel && kernel.status === 'idle' && cells.length > 0 && cells.every(c => c.model.executionCount !== null);
}
"""

ERRORS_JS = r"""
() => jupyterapp.shell.currentWidget.content.widgets
  .filter(c => c.model.type === 'code')
  .flatMap(c => { const out = []; for (let i = 0; i < c.model.outputs.length; i++) out.push(c.model.outputs.get(i).toJSON()); return out; })
  .filter(o => o.output_type === 'error').map(o => `${o.ename}: ${o.evalue}`)
"""

TABLE_JS = r"""
() => Object.fromEntries(Array.from(document.querySelectorAll('.kv-calculator-widget tr[data-row]'))
  .map(tr => [tr.cells[0].textContent, tr.cells[1].textContent]))
"""

BATCH_IS_JS = r"""
(batch) => Array.from(document.querySelectorAll('.kv-calculator-widget tr[data-row]'))
  .some(tr => tr.cells[0].textContent === 'sequences that fit (batch)' && tr.cells[1].textContent === batch)
"""


@pytest.fixture
def lab(tmp_path):
    """(base URL, log path) of a JupyterLab serving a copy of chapter 3; stopped afterwards."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(CHAPTER, root / CHAPTER.name)
    env = dict(os.environ, JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"))  # this environment's kernel first
    env.pop("MPLBACKEND", None)
    with jupyterlab(sys.executable, root, tmp_path, env, START_TIMEOUT_S,
                    args=[f"--LabApp.app_settings_dir={LAB_SETTINGS}"]) as served:
        yield served


@contextmanager
def chapter_in_lab(browser, base: str, log: str, name: str):
    """Open chapter ``name`` in JupyterLab at ``base``, wait for its kernel, run every cell and
    check that none failed; yield ``page``.  Every console error, uncaught exception and request
    that leaves 127.0.0.1 (blocked) is written down and fails the test at the end."""
    problems: list[str] = []
    page = browser.new_page()

    def route(route_):
        url = route_.request.url
        if url.startswith(base) or url.startswith(("data:", "blob:")):
            route_.continue_()
        else:
            problems.append(f"request that left 127.0.0.1 (blocked): {url}")
            route_.abort("blockedbyclient")

    page.route("**/*", route)
    page.on("console", lambda msg: msg.type == "error" and problems.append(f"console error: {msg.text}"))
    page.on("pageerror", lambda err: problems.append(f"uncaught error: {err}"))
    try:
        page.goto(base + f"lab/tree/{name}", wait_until="load", timeout=TIMEOUT_MS)
        page.wait_for_function("() => window.jupyterapp && jupyterapp.shell.currentWidget && "
                               "jupyterapp.shell.currentWidget.sessionContext && "
                               "jupyterapp.shell.currentWidget.sessionContext.session && "
                               "jupyterapp.shell.currentWidget.sessionContext.session.kernel", timeout=TIMEOUT_MS)
        page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.ready")
        page.evaluate("() => jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(ALL_RAN_JS, timeout=TIMEOUT_MS)
        assert page.evaluate(ERRORS_JS) == [], "a cell of the chapter failed in JupyterLab"
        yield page
        page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    finally:
        page.close()
    assert not problems, "\n".join(problems) + f"\n(JupyterLab's log: {log})"


def test_the_calculator_works_in_jupyterlab(lab, browser, screenshots):
    base, log = lab
    with chapter_in_lab(browser, base, log, CHAPTER.name) as page:
        widget = page.locator(".kv-calculator-widget")
        widget.wait_for(timeout=TIMEOUT_MS)
        widget.scroll_into_view_if_needed()
        # the chapter left the calculator on its example
        assert page.evaluate(TABLE_JS)["sequences that fit (batch)"] == "4"

        # the reader types: the widget redraws, and the value reaches Python
        widget.locator('[data-control="layers"]').fill("80")
        page.wait_for_function("() => document.querySelector('.kv-calculator-widget tr[data-row]')"
                               ".cells[1].textContent.startsWith('1,310,720')", timeout=10_000)
        per_token = kv_cache_bytes(80, 32, 128, 1, 2)
        assert page.evaluate(TABLE_JS)["cache per token"] == f"{per_token:,} bytes (1.25 MiB)"
        said = page.evaluate(KERNEL_RUN_JS, "print(calc.layers, calc.model_preset, calc.result['bytes_per_token'],"
                                            " calc.result['max_batch'])")
        assert said.split() == ["80", "custom", str(per_token), "1"], said

        # a notebook cell sets a trait: the widget redraws
        said = page.evaluate(KERNEL_RUN_JS, "calc.model_preset = '70B-GQA'; print(calc.kv_heads)")
        assert said.strip() == "8", said
        page.wait_for_function("() => document.querySelector('.kv-calculator-widget [data-control=\"kv_heads\"]')"
                               ".value === '8'", timeout=10_000)
        assert page.evaluate(TABLE_JS)["sequences that fit (batch)"] == "0: the weights alone do not fit in this GPU"

        # the reader presses GiB on the example: Python reads the same 24 and 14 as GiB, a batch of 5
        page.evaluate(KERNEL_RUN_JS, "calc.model_preset, calc.gpu_preset = '7B', 'A10'")
        page.wait_for_function(BATCH_IS_JS, arg="4", timeout=10_000)
        widget.locator('button[data-control="unit"][data-value="GiB"]').click()
        page.wait_for_function(BATCH_IS_JS, arg="5", timeout=10_000)
        said = page.evaluate(KERNEL_RUN_JS, "print(calc.unit, calc.gpu_memory, calc.weights, calc.gpu_preset,"
                                            " calc.model_preset, calc.result['max_batch'])")
        assert said.split() == ["GiB", "24.0", "14.0", "custom", "custom", "5"], said

        # bad input: a message in the widget; Python keeps the last valid value
        widget.locator('[data-control="tokens"]').fill("-1")
        assert "tokens T cannot be negative" in widget.locator(".cw-message").text_content()
        said = page.evaluate(KERNEL_RUN_JS, "print(calc.tokens)")
        assert said.strip() == "4096", said
        page.screenshot(path=str(screenshots / "jupyterlab__03_cache_memory.png"))
