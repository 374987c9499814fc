"""The learner's copy (``make release``) used the way a learner uses it: a fresh venv made with the
commands of the copy's own README (pip installs from this machine's wheel cache and registry),
every link between its notebooks followed, and every chapter and exercise notebook executed in
that venv: first as handed out (a chapter runs to its end, a cell that needs an answer not written
yet saying so in one line; an exercise runs to the end, or stops where it calls an answer not
written yet, with a message that names the exercise; never an import error), then with every
exercise done (each runs to the end, the chapters on the learner's answers).

The venv takes minutes to make (pip resolves JupyterLab and the chapters' packages), and running
every notebook twice takes several more: the copy and its venv are made once per test session
(the ``learner_copy`` fixture), and pip's own wheel cache makes the venvs after the first quicker.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]

RUNNER = r'''
import json, re, sys
from pathlib import Path
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

results = {}
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=1200, kernel_name="python3",
                            resources={"metadata": {"path": str(Path(path).parent)}})
    try:
        client.execute()
        error = None
    except CellExecutionError as err:
        error = {"name": err.ename, "value": re.sub(r"\x1b\[[0-9;]*m", "", str(err.evalue))}
    printed = "".join(o.get("text", "") if o.get("output_type") == "stream"
                      else o.get("data", {}).get("text/plain", "") + "\n"
                      for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                      if o.get("output_type") in ("stream", "display_data"))
    results[path] = {"error": error, "printed": printed}
print(json.dumps(results))
'''


def _run(copy: Path, python: Path, notebooks: list[Path]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MPLBACKEND")}
    proc = subprocess.run([str(python), "-c", RUNNER, *map(str, notebooks)], cwd=copy, env=env,
                          capture_output=True, text=True, timeout=7200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fill_answers(exercise: Path, solution: Path) -> None:
    """The exercise notebook with its answer cells (tagged ``answer``) replaced by the solution's."""
    def answer_cells(nb):
        return [c for c in nb["cells"] if "answer" in c.get("metadata", {}).get("tags", [])]
    nb, done = json.loads(exercise.read_text()), json.loads(solution.read_text())
    mine, theirs = answer_cells(nb), answer_cells(done)
    assert len(mine) == len(theirs) > 0, exercise.name
    for cell, answer in zip(mine, theirs):
        cell["source"] = answer["source"]
    exercise.write_text(json.dumps(nb, indent=1))


def _notebooks(copy: Path) -> list[Path]:
    return sorted((copy / "book" / "chapters").glob("*.ipynb")) + sorted((copy / "exercises").glob("*.ipynb"))


def test_the_copys_packages_are_its_own(learner_copy):
    copy, python = learner_copy
    proc = subprocess.run([str(python), "-c", "import json, kvcache, ga2, coursebook, public_checks, answers;"
                           "print(json.dumps([m.__file__ for m in (kvcache, ga2, coursebook, public_checks, answers)]));"
                           "import importlib.util as u; print(u.find_spec('graders'))"],
                          cwd="/", capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr
    files, graders = proc.stdout.strip().splitlines()
    assert all(f.startswith(str(copy)) for f in json.loads(files)), files
    assert graders == "None"                                               # no grader in a learner's venv


def test_every_link_between_the_notebooks_resolves_in_the_copy(learner_copy):
    copy, _ = learner_copy
    link = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
    followed = 0
    for path in _notebooks(copy) + [copy / "README.md"]:
        if path.suffix == ".ipynb":
            texts = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
        else:
            texts = [path.read_text()]
        for target in (t for text in texts for t in link.findall(text)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            assert resolved.is_file() and copy.resolve() in resolved.parents, f"{path}: {target}"
            followed += 1
    assert followed >= 2 * len(list((copy / "exercises").glob("*.ipynb")))      # both ways, every exercise


def test_every_notebook_runs_as_handed_out_then_on_the_learners_answers(learner_copy):
    copy, python = learner_copy
    # as handed out: to the end, or stopped by an answer not written yet, named
    before = _run(copy, python, _notebooks(copy))
    for path, result in before.items():
        error = result["error"]
        if error is not None:
            assert error["name"] == "NotImplementedError", (path, error)
            assert re.search(r"is the exercise \w+ of chapter \d+: write it in exercises/\w+\.ipynb",
                             error["value"]), (path, error)
    # a chapter goes to its end: a cell that needs an answer not written says so in one line
    assert all(before[str(p)]["error"] is None for p in (copy / "book" / "chapters").glob("*.ipynb"))
    first = before[str(copy / "book" / "chapters" / "01_attention_by_hand.ipynb")]["printed"]
    assert "softmax (exercises/softmax.ipynb: not written yet)" in first
    assert "This cell needs your softmax (exercises/softmax.ipynb), not written yet" in first
    assert "Traceback" not in first
    assert all(before[str(p)]["error"] is None for p in (copy / "exercises").glob("*.ipynb")
               if p.stem not in ("attention_tail", "mutants"))            # they use the machine's parts
    # every exercise done: the learner's answers in their notebooks' answer cells (the reference
    # answers', as a learner who finished would have them), every notebook to the end
    for path in (copy / "exercises").glob("*.ipynb"):
        _fill_answers(path, ROOT / "solutions" / path.name)
    after = _run(copy, python, _notebooks(copy))
    failed = {p: r["error"] for p, r in after.items() if r["error"]}
    assert not failed, failed
    chapter1 = after[str(copy / "book" / "chapters" / "01_attention_by_hand.ipynb")]["printed"]
    assert re.search(r"This chapter runs on your answers to causal_attention \(exercises/causal_attention.ipynb: "
                     r"saved [^,]+, passes its \d+ public checks\) and softmax \(exercises/softmax.ipynb: saved "
                     r"[^,]+, passes its \d+ public checks\)\.", chapter1), chapter1
    assert "This cell needs" not in chapter1


def test_the_copys_set_up_leaves_no_build_droppings_at_its_top(learner_copy):
    """``pip install -e .`` of the README's set-up writes the package's metadata (``*.egg-info``)
    into the hidden ``.setuptools/`` the copy's pyproject names, not beside the README; nor a
    ``build/`` or ``dist/``.  The JupyterLab settings the set-up copies are in the venv."""
    copy, _ = learner_copy
    top = sorted(p.name for p in copy.iterdir())
    assert not [n for n in top if n.endswith(".egg-info") or n in ("build", "dist")], top
    assert list((copy / ".setuptools").glob("*.egg-info")), "pip wrote the metadata elsewhere"
    settings = copy / ".venv" / "share" / "jupyter" / "lab" / "settings"
    assert json.loads((settings / "overrides.json").read_text()) == json.loads(
        (ROOT / "tools" / "jupyterlab_settings" / "overrides.json").read_text())
