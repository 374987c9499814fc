"""The exercise pages in Chromium: the editor, Run, Stop, Reset, the code kept, the notebook
downloaded and graded, Python in the browser with no request off the local server.

For each exercise, on one page load: the starter says it is not implemented, a wrong answer fails
and the course's solution passes, each with exactly the words the notebook's public-checks cell
prints for the same code (computed here by running the notebook's cells in this Python);
``while True: pass`` is stopped by Stop and the next Run works; a reload keeps the code; the
solution typed into the editor and downloaded gets full marks from the grader.  The pages of the
GA-2 exercises run the reader's earlier answers (the requantizer, the attention tail) from this
browser's storage, as their notebooks' ``ga2.install_from`` does: the test writes the solutions
there first.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course import catalogue as registry
from coursetools.answer_leaks import describe, find_leaks

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import site_exercises  # noqa: E402

NAMES = list(registry.names())
STORE = "kvcourse.exercise.{}.code"
RUNTIME_FILES = ("python.wasm.gz", "python-stdlib.zip.gz", "course.zip", "python-runtime.js", "python-worker.js")
#: The notebook's two cells as the page runs them, in this Python: what the notebook prints.
NOTEBOOK_RUN = r"""
import contextlib, io, json, sys
cases = json.load(sys.stdin)
out = {}
for key, (code, checks) in cases.items():
    namespace = {"__name__": "__main__"}
    exec(compile(code, "your code", "exec"), namespace)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            exec(compile(checks, "public checks", "exec"), namespace)
        except AssertionError as err:
            if type(err).__name__ != "PublicCheckFailed":
                raise
    out[key] = printed.getvalue()
json.dump(out, sys.stdout)
"""


def _solution(name: str) -> str:
    return site_exercises.starter(json.loads((ROOT / "solutions" / f"{name}.ipynb").read_text()))


def _wrong(name: str, starter: str) -> str:
    """The starter with every graded name defined again, wrongly: a function that returns None,
    a class whose objects have no methods."""
    lines = [starter]
    for fn in registry.get(name).functions:
        if f"class {fn}" in starter:
            lines.append(f"class {fn}:\n    def __init__(self, *args, **kwargs):\n        pass\n")
        else:
            lines.append(f"def {fn}(*args, **kwargs):\n    return None\n")
    return "\n\n".join(lines)


@pytest.fixture(scope="module")
def cases() -> dict:
    """{name: {"starter"|"wrong"|"solution": (code, what the notebook prints)}}."""
    found, inputs = {}, {}
    for name in NAMES:
        nb = site_exercises.exercise_data(name)
        checks = "".join(nb["cells"][nb["metadata"]["kvcourse"]["page"]["checks_cell"]]["source"])
        starter = site_exercises.starter(nb)
        codes = {"starter": starter, "wrong": _wrong(name, starter), "solution": _solution(name)}
        found[name] = codes
        inputs.update({f"{name}/{kind}": (code, checks) for kind, code in codes.items()})
    proc = subprocess.run([sys.executable, "-c", NOTEBOOK_RUN], input=json.dumps(inputs), capture_output=True,
                          text=True, cwd=ROOT / "exercises", timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    return {name: {kind: (code, printed[f"{name}/{kind}"]) for kind, code in codes.items()}
            for name, codes in found.items()}


def _open(browser, url: str):
    page = browser.new_page()
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function("window.courseExercise !== undefined")
    return page, requests, errors


def _run(page) -> str:
    """Run, and the text the page shows, which is what run() gives."""
    text = page.evaluate("courseExercise.run()")
    assert text == page.eval_on_selector("[data-exercise-output]", "e => e.textContent")
    return text


def test_the_site_ships_no_answer_to_the_browser(site):
    for folder in (site / "_static" / "exercise", site / "_static" / "vendor" / "runtime"):
        assert folder.is_dir(), f"{folder} is missing: the site was built without the exercise pages' files"
        leaks = find_leaks(folder)
        assert not leaks, describe(leaks)
    names = {p.name for p in (site / "_static" / "exercise").iterdir()}
    assert {f"{n}.ipynb" for n in NAMES} | {"course.zip"} <= names


@pytest.mark.parametrize("name", NAMES)
def test_an_exercise_page_runs_its_public_checks(name, browser, base_url, cases, tmp_path):
    page, requests, errors = _open(browser, f"{base_url}exercises/{name}.html")
    try:
        # another page of this browser may have stored code for this one (the GA-2 pages do)
        page.evaluate("(k) => localStorage.removeItem(k)", STORE.format(name))
        page.reload()
        page.wait_for_function("window.courseExercise !== undefined")
        assert not [u for u in requests if u.endswith(RUNTIME_FILES)], "a page only read fetched the runtime"
        for earlier in site_exercises.exercise_data(name)["metadata"]["kvcourse"]["page"]["installs"]:
            page.evaluate("([k, v]) => localStorage.setItem(k, v)", [STORE.format(earlier), _solution(earlier)])
        starter, said = cases[name]["starter"]
        assert page.evaluate("courseExercise.getCode()") == starter
        text = _run(page)
        assert text == said and "not implemented" in text
        assert page.evaluate("document.querySelector('progress').max") > 20e6    # the bytes it fetched

        for kind, marker in (("wrong", "[FAIL]"), ("solution", "public checks passed")):
            code, said = cases[name][kind]
            page.evaluate("(c) => courseExercise.setCode(c)", code)
            text = _run(page)
            assert text == said and marker in text, (kind, text, said)

        page.evaluate("courseExercise.setCode('while True:\\n    pass\\n')")
        page.evaluate("() => { window.__running = courseExercise.run(); }")     # not awaited: it never ends
        page.wait_for_function("document.querySelector('[data-control=stop]').disabled === false")
        time.sleep(0.5)
        stop = time.monotonic()
        page.click("[data-control=stop]")
        text = page.evaluate("window.__running")
        assert time.monotonic() - stop < 2.0 and text.endswith("Stopped.\n")
        code, said = cases[name]["solution"]
        page.evaluate("(c) => courseExercise.setCode(c)", code)
        assert _run(page) == said

        page.evaluate("(c) => courseExercise.setCode(c)", code + "# kept across a reload\n")
        page.reload()
        page.wait_for_function("window.courseExercise !== undefined")
        assert page.evaluate("courseExercise.getCode()") == code + "# kept across a reload\n"

        page.click(".course-exercise .cm-content")
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(code)
        assert page.evaluate("courseExercise.getCode()") == code
        with page.expect_download() as download:
            page.click("[data-control=download]")
        notebook = tmp_path / f"{name}.ipynb"
        download.value.save_as(notebook)
        assert not errors, errors
        assert all(u.startswith((base_url, "blob:", "data:")) for u in requests), \
            [u for u in requests if not u.startswith((base_url, "blob:", "data:"))]
    finally:
        page.close()
    result = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "graders", "grade", str(notebook), "--exercise", name,
                           "--json", str(result), "--no-progress"], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)
    graded = json.loads(result.read_text())
    assert graded["score"] == graded["max_score"] > 0, proc.stdout[-2000:]


def test_reset_puts_the_starter_back_and_ctrl_enter_runs(browser, base_url, cases):
    page, _, errors = _open(browser, f"{base_url}exercises/kv_cache_bytes.html")
    try:
        page.evaluate("courseExercise.setCode('x = 1\\n')")
        page.click("[data-control=reset]")
        starter, said = cases["kv_cache_bytes"]["starter"]
        assert page.evaluate("courseExercise.getCode()") == starter
        page.click(".course-exercise .cm-content")
        page.keyboard.press("Control+Enter")
        page.wait_for_function("document.querySelector('[data-exercise-output]').textContent.includes('not implemented')",
                               timeout=120_000)
        page.wait_for_function("document.querySelector('[data-control=run]').disabled === false")
        assert page.eval_on_selector("[data-exercise-output]", "e => e.textContent") == said
        page.click(".course-exercise .cm-content")
        page.keyboard.press("Control+End")
        page.keyboard.press("Enter")
        page.keyboard.type("def f():")
        page.keyboard.press("Enter")
        page.keyboard.press("Tab")
        assert page.evaluate("courseExercise.getCode()").endswith("def f():\n        ")  # auto-indent, then Tab
        assert not errors, errors
    finally:
        page.close()


def test_a_browser_that_cannot_run_python_is_pointed_to_the_notebook(browser, base_url):
    page = browser.new_page()
    try:
        page.add_init_script("delete window.DecompressionStream")
        page.goto(f"{base_url}exercises/softmax.html")
        page.wait_for_function("window.courseExercise !== undefined")
        text = page.evaluate("courseExercise.run()")
        assert text == ("This browser cannot run Python on the page (it lacks DecompressionStream): download "
                        "the notebook and run its public checks in JupyterLab (make lab).\n")
        assert page.evaluate("courseExercise.getCode()").startswith("import numpy as np")
    finally:
        page.close()
