"""``make lab``: the whole course in JupyterLab, its chapters read as the learner's copy has them.

``coursetools.course_lab`` writes the reading tree (``_build/lab``): the chapters with the build's
figures in their text and outputs in their cells, every other entry a link to the course's own.
The tree is tested as a folder (what it links, what it keeps of a reader's edits), then in
Chromium, in JupyterLab started as ``make lab`` starts it (this venv, its MyST renderer, the
course's settings): no ``{glue`` role and no ``:class:`` option in view, every figure the chapter
states shown, its dropdowns closed, Run All with no error, and no console error on the way.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from coursetools.course_lab import make_lab_tree
from coursetools.lab_chapters import built_notebook
from test_learner_copy_lab import _figures

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "_build" / "jupyter_execute" / "book" / "chapters"
LAB_SETTINGS = ROOT / "tools" / "jupyterlab_settings"
CHAPTER = "01_attention_by_hand"
TIMEOUT_MS = 240_000


def _needs_the_build():
    assert built_notebook(ROOT / "_build", Path(CHAPTER + ".ipynb")).is_file(), (
        "the chapters' figures and outputs come from the book's build: run 'make book' first")


def test_the_reading_tree_links_the_course_and_writes_the_chapters_as_read(tmp_path):
    _needs_the_build()
    tree = tmp_path / "lab"
    report = make_lab_tree(ROOT, tree)
    assert report[0].startswith(f"the course to read in JupyterLab: {tree}")
    chapters = sorted(p.name for p in (ROOT / "book" / "chapters").glob("*.ipynb"))
    assert sorted(p.name for p in (tree / "book" / "chapters").glob("*.ipynb")) == chapters
    assert not any((tree / "book" / "chapters" / n).is_symlink() for n in chapters)
    # everything else is the course's own: an exercise saved here is saved in the course
    for name in ("exercises", "kvcache", "public_checks", "README.md"):
        assert (tree / name).is_symlink() and (tree / name).resolve() == (ROOT / name).resolve(), name
    assert not (tree / "_build").exists() and not (tree / ".venv").exists()
    first = json.loads((tree / "book" / "chapters" / f"{CHAPTER}.ipynb").read_text())
    markdown = "".join("".join(c["source"]) for c in first["cells"] if c["cell_type"] == "markdown")
    assert "{glue" not in markdown and any(c.get("outputs") for c in first["cells"] if c["cell_type"] == "code")
    ids = [c["id"] for c in first["cells"]]
    assert all(ids) and len(set(ids)) == len(ids)
    for link in re.findall(r"\]\((\.\./\.\./exercises/\w+\.ipynb)\)", markdown):      # the chapter's links resolve
        assert (tree / "book" / "chapters" / link).resolve().is_file(), link
    # a second run leaves the chapters (and a reader's edits to them) alone, until a chapter changes
    copy = tree / "book" / "chapters" / f"{CHAPTER}.ipynb"
    copy.write_text(copy.read_text() + "\n")
    edited = copy.read_text()
    assert "0 chapters written" in make_lab_tree(ROOT, tree)[0]
    assert copy.read_text() == edited
    past = time.time() - 3600
    os.utime(copy, (past, past))
    assert "1 chapters written" in make_lab_tree(ROOT, tree)[0]
    assert json.loads(copy.read_text()) == first


def test_a_folder_where_a_link_goes_is_refused(tmp_path):
    tree = tmp_path / "lab"
    (tree / "exercises").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="is a folder, not a link"):
        make_lab_tree(ROOT, tree)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def course_lab(tmp_path):
    """JupyterLab as ``make lab`` starts it, on a reading tree in ``tmp_path``; its base URL."""
    _needs_the_build()
    tree = tmp_path / "lab"
    make_lab_tree(ROOT, tree)
    settings = tmp_path / "settings" / "@jupyterlab"
    (settings / "apputils-extension").mkdir(parents=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    (settings / "notebook-extension").mkdir()                 # every cell in the page, to read its text
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = dict(os.environ, JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               IPYTHONDIR=str(tmp_path / "ipython"))
    env.pop("MPLBACKEND", None)
    port = _free_port()
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--ServerApp.token=", "--ServerApp.password=",
               f"--ServerApp.root_dir={tree}", "--LabApp.expose_app_in_browser=True",
               f"--LabApp.app_settings_dir={LAB_SETTINGS}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = tmp_path / "jupyterlab.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, cwd=tree, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(base + "api/status", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


ALL_RAN_JS = r"""
() => {
  const panel = jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return kernel && kernel.status === 'idle' && cells.length > 0 && cells.every(c => c.model.executionCount !== null);
}
"""
ERRORS_JS = r"""
() => jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')
  .flatMap(c => { const out = []; for (let i = 0; i < c.model.outputs.length; i++) out.push(c.model.outputs.get(i).toJSON()); return out; })
  .filter(o => o.output_type === 'error').map(o => `${o.ename}: ${o.evalue}`)
"""


def test_make_lab_shows_the_chapters_as_the_copy_does(course_lab, playwright_driver, tmp_path):
    base = course_lab
    browser = playwright_driver.chromium.launch(executable_path=os.environ.get("KVCOURSE_CHROMIUM", "/usr/bin/chromium"),
                                                headless=True, args=["--no-sandbox", "--disable-gpu",
                                                                     "--disable-dev-shm-usage"])
    problems: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda msg: msg.type == "error" and problems.append(f"console error: {msg.text}"))
        page.on("pageerror", lambda err: problems.append(f"uncaught error: {err}"))
        page.goto(base + f"lab/tree/book/chapters/{CHAPTER}.ipynb", wait_until="load", timeout=TIMEOUT_MS)
        page.wait_for_function("() => window.jupyterapp && jupyterapp.shell.currentWidget && "
                               "jupyterapp.shell.currentWidget.sessionContext && "
                               "jupyterapp.shell.currentWidget.sessionContext.session && "
                               "jupyterapp.shell.currentWidget.sessionContext.session.kernel", timeout=TIMEOUT_MS)
        page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.ready")
        page.wait_for_function("() => document.querySelectorAll('.jp-MarkdownCell').length > 3 && "
                               "document.querySelector('.jp-MarkdownCell h1')", timeout=TIMEOUT_MS)
        time.sleep(2)                       # the MyST renderer's last cells
        shown = page.evaluate("() => jupyterapp.shell.currentWidget.content.node.innerText")
        assert "{glue" not in shown and ":class:" not in shown and "```{" not in shown, shown[:2000]
        everything = re.sub(r"\s+", " ", page.evaluate("() => jupyterapp.shell.currentWidget.content.node.textContent"))
        missing = [f for f in _figures(CHAPTER) if re.sub(r"\s+", " ", f) not in everything]
        assert not missing, f"figures not in the page: {missing[:5]}"
        closed = page.evaluate("() => Array.from(jupyterapp.shell.currentWidget.content.node"
                               ".querySelectorAll('.jp-MarkdownCell details')).map(d => d.open)")
        assert closed and not any(closed), closed
        page.evaluate("() => jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(ALL_RAN_JS, timeout=TIMEOUT_MS, polling=500)
        assert page.evaluate(ERRORS_JS) == []
        page.evaluate("() => jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    finally:
        browser.close()
    assert not problems, "\n".join(problems)
