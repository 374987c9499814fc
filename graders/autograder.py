"""Grading inside a Gradescope autograder: what ``run_autograder`` runs for every submission.

``python -m graders autograder EXERCISE... --out DIR`` builds the autograders
(``coursetools.gradescope``); this module is the part of them that grades.

Gradescope unzips an autograder into ``/autograder/source``, runs its ``setup.sh`` there once
(as root, when it builds the assignment's image), then, for every submission, copies the
student's files into ``/autograder/submission/`` (under the names the student gave them), runs
``/autograder/run_autograder`` and reads ``/autograder/results/results.json``.

``DIR/EXERCISE.zip`` holds, at its top::

    setup.sh           apt: bubblewrap and util-linux (the sandbox), python3 and pip;
                       pip: requirements.txt
    run_autograder     $AUTOGRADER_PYTHON -m graders.autograder, in $AUTOGRADER_ROOT/source
    requirements.txt   the lines of the course's requirements.txt for the packages grading imports
    exercise.json      {"exercise": EXERCISE}: the exercise is pinned here, never read from the
                       submission
    graders/           the grader, with the hidden tests of EXERCISE only (every other module of
                       graders/exercises/ that is not a shared helper is left out)
    ga2/ ...           the course packages that exercise's hidden tests import (their ``libs`` and
                       their imports): the GA-2 machine for attention_tail and mutants

Before grading, ``run_autograder`` (as root, Gradescope's) makes ``source/`` unreadable to
other users (``close_source``; the interpreter and its packages stay readable), so that the
sandbox's weakest fallback, which shows the submission the machine's files, grades there.

Grading one submission (``run``):

1. the notebooks of ``submission/`` (any name, in sub-folders too; checkpoints and dot files
   skipped): exactly one is graded; none or several give every test 0 and a result that names
   the files that were there;
2. ``grading.grade_file(path, EXERCISE)``, the same call as ``python -m graders grade``, so the
   same scores;
3. the result in Gradescope's format (``gradescope_result``): ``score``, ``execution_time``,
   ``output``, ``stdout_visibility``, ``tests`` (each ``name``, ``score``, ``max_score``,
   ``status``, ``output``, ``visibility``, and ``number`` when the grader gives one) and
   ``extra_data`` with everything else of ours: the exercise, the submission's status, the
   isolation that held (the "Isolation: ..." paragraph, written for instructors, goes there and
   to the autograder's log, never to what the student reads), the runs, the hashes.

Whatever happens (no sandbox can be made here, the grader fails), ``results.json`` is written,
with every test at 0 and a sentence for the student; the details go to ``extra_data`` and to the
log (run_autograder's standard output, which Gradescope shows the instructor).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from . import grading, registry, results
from .sandbox import SandboxUnavailable
from .sandbox.exposure import close_to_others, gradescope_source
from .sandbox.interpreter import python_roots

__all__ = ["gradescope_result", "find_notebooks", "run", "close_source", "main", "RUN_AUTOGRADER", "SETUP_SH",
           "TEST_KEYS", "RESULT_KEYS", "SKIP_PARTS"]

#: What Gradescope reads in a test and at the top of results.json; everything else is ours and
#: goes under ``extra_data``.
TEST_KEYS = ("name", "score", "max_score", "status", "output", "visibility", "number")
RESULT_KEYS = ("score", "execution_time", "output", "stdout_visibility", "tests", "extra_data")

SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", "__MACOSX"}
#: Where Gradescope leaves a submission's files and reads the result, under the root.
SUBMISSION, RESULTS = "submission", "results"

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: the student's files are in $ROOT/submission/, the
# result goes to $ROOT/results/results.json.  AUTOGRADER_ROOT and AUTOGRADER_PYTHON let the
# course's tests run it in a folder laid out the same way, with the interpreter they choose.
set -u
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-python3}"
RESULT="$ROOT/results/results.json"
rm -f "$RESULT"
cd "$ROOT/source" && PYTHONPATH="$ROOT/source" "$PYTHON" -m graders.autograder --root "$ROOT"
# The grader writes a result whatever the submission does; should its interpreter itself be
# missing or killed, Gradescope still gets a result that says so.
if [ ! -s "$RESULT" ]; then
  mkdir -p "$ROOT/results"
  printf '%s\n' '{"score": 0.0, "output": "The autograder could not start: the problem is on the course'"'"'s side, not in your notebook. Your instructor can see what happened.", "stdout_visibility": "hidden", "tests": [], "extra_data": {"status": "grader_error"}}' > "$RESULT"
fi
exit 0
"""

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, in /autograder/source, when it builds the autograder's image
# (Ubuntu): the sandbox's tools from apt, the Python packages grading needs from requirements.txt
# (the course's own pins).  PIP_BREAK_SYSTEM_PACKAGES lets pip install into the image's Python
# where the distribution marks it as managed by apt; older pips ignore it.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends bubblewrap util-linux python3 python3-pip
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir -r requirements.txt
"""


# ------------------------------------------------------------------------------------ grading


def find_notebooks(folder: Path) -> list[Path]:
    """Every notebook of a submission folder (sub-folders too), without checkpoints or dot files."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*.ipynb")
                  if p.is_file() and not SKIP_PARTS & set(p.relative_to(folder).parts)
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _files_seen(folder: Path, limit: int = 20) -> str:
    if not folder.is_dir():
        return "no submission folder"
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    if not names:
        return "no file at all"
    shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return f"the files handed in: {shown}"


def _zero_result(exercise: str, summary: str, status: str, started: float, extra: dict | None = None) -> dict:
    """Every test of ``exercise`` at 0 with ``summary`` as the reason (the maximum stays right)."""
    try:
        tests = [results.test_entry(i.name, i.points, False, f"not graded: {summary}", i.visibility)
                 for i in registry.items(exercise)]
    except Exception:  # noqa: BLE001 - the zero result is written even when the tests cannot be listed
        tests = []
    return results.make_result(exercise=exercise, tests=tests, status=status, isolation="none",
                               execution_time=time.perf_counter() - started, output=summary, extra=extra)


def _student_summary(result: dict) -> tuple[str, str]:
    """(what the student reads above the tests, the "Isolation: ..." paragraph for the log)."""
    kept, isolation = [], ""
    for line in str(result.get("output", "")).splitlines():
        if line.startswith("Isolation:"):
            isolation = line
        else:
            kept.append(line)
    if result.get("status") == "grader_error":
        kept = ["The autograder could not grade this submission: the problem is on the course's side, "
                "not in your notebook. Your instructor can see what happened; submit again later or "
                "ask them."]
    return "\n".join(kept), isolation


def gradescope_result(result: dict) -> dict:
    """The grader's result in Gradescope's results.json format: the keys Gradescope reads, and
    everything else of ours under ``extra_data``."""
    output, isolation = _student_summary(result)
    tests = [{key: test[key] for key in TEST_KEYS if key in test} for test in result.get("tests", [])]
    extra = {key: value for key, value in result.items() if key not in ("score", "execution_time", "output",
                                                                        "stdout_visibility", "tests")}
    extra["isolation_paragraph"] = isolation
    if result.get("status") == "grader_error":
        extra["grader_output"] = result.get("output", "")
    return {"score": result.get("score", 0.0), "execution_time": result.get("execution_time", 0.0),
            "output": output, "stdout_visibility": "hidden", "tests": tests, "extra_data": extra}


def _grade_one(exercise: str, notebooks: list[Path], folder: Path, started: float) -> dict:
    """The grader's result for the submission folder: its one notebook graded, or a zero."""
    if not notebooks:
        return _zero_result(exercise, f"no notebook (.ipynb) was handed in ({_files_seen(folder)}); hand in "
                            f"your {exercise} exercise notebook.", "missing", started)
    if len(notebooks) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in notebooks)
        return _zero_result(exercise, f"{len(notebooks)} notebooks were handed in ({names}): hand in only "
                            f"your {exercise} exercise notebook.", "usage_error", started)
    try:
        return grading.grade_file(notebooks[0], exercise)
    except (grading.UsageError, SandboxUnavailable) as err:
        return _zero_result(exercise, f"the notebook could not be graded: {err}", "grader_error", started,
                            extra={"grader_problem": str(err)})


def run(root: Path, exercise: str | None = None) -> dict:
    """Grade ``root/submission``'s notebook for the pinned exercise and write
    ``root/results/results.json``; returns what was written."""
    started = time.perf_counter()
    root = Path(root)
    if exercise is None:
        exercise = json.loads((Path(__file__).resolve().parent.parent / "exercise.json")
                              .read_text(encoding="utf-8"))["exercise"]
    folder = root / SUBMISSION
    notebooks = find_notebooks(folder)
    try:
        result = _grade_one(exercise, notebooks, folder, started)
    except Exception as err:  # noqa: BLE001 - a result is written whatever happens
        result = _zero_result(exercise, "the grader failed", "grader_error", started,
                              extra={"grader_traceback": traceback.format_exc()[-4000:]})
        result["output"] = f"The grader itself failed ({type(err).__name__}: {err})."
    if len(notebooks) == 1:
        result["submission"] = str(notebooks[0].relative_to(folder))
    graded = gradescope_result(result)
    results.write_json(root / RESULTS / "results.json", graded)
    _log(result, graded)
    return graded


def _log(result: dict, graded: dict) -> None:
    """The instructor's log (run_autograder's standard output): the feedback as ``grade`` prints
    it (the isolation that held included), what went wrong in the grader, the score written."""
    try:
        print(results.format_text(result))
    except Exception as err:  # noqa: BLE001 - the log is a courtesy; results.json is what counts
        print(f"(the feedback could not be printed: {type(err).__name__})")
    for key in ("grader_problem", "grader_traceback"):
        if result.get(key):
            print(result[key])
    print(f"results.json: score {graded['score']:g} of {sum(t['max_score'] for t in graded['tests']):g}")


def main(argv: list[str] | None = None) -> int:
    """``run_autograder``'s entry point: grade the submission under ``--root``."""
    parser = argparse.ArgumentParser(prog="python -m graders.autograder",
                                     description="Grade a Gradescope submission (run by run_autograder).")
    parser.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"),
                        help="Gradescope's folder: submission/ is read, results/results.json written")
    args = parser.parse_args(argv)
    close_source()
    run(Path(args.root))
    return 0


def close_source() -> list[str]:
    """Make this package's source folder (the grader, its references) unreadable to other
    users before grading, so that the sandbox's weakest fallback (no bubblewrap, no util-linux:
    the submission as a user of its own, with the machine's files in view) finds it closed and
    grades.  Only a root grader in a built package (``exercise.json`` beside ``graders/``) does
    it: the files are its own there.  The interpreter and the packages the sandbox needs stay
    readable.  Returns what was closed."""
    source = gradescope_source()
    if source is None or os.geteuid() != 0:
        return []
    try:
        closed = close_to_others(source, python_roots())
    except OSError as err:      # the sandbox's own check then says what is still readable
        print(f"the source folder could not be closed to other users: {err}")
        return []
    return closed


if __name__ == "__main__":
    sys.exit(main())
