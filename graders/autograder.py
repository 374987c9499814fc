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

Before grading, ``run_autograder`` (as root, Gradescope's) removes ``results/`` and makes it
again, closed to other users (``prepare_results``: a submission runs as another user and cannot
write there), and makes ``source/`` unreadable to other users (``close_source``; the interpreter
and its packages stay readable), so that the sandbox's weakest fallback, which shows the
submission the machine's files, grades there.  After the grader, whatever became of it,
``--finish`` (``finish``) kills what the sandboxes' users left and keeps results.json only if the
grader wrote it.

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
log (run_autograder's standard output, which Gradescope shows the instructor).  It is written at once
(nothing graded yet), after each sandbox's tests are judged and at the end, atomically, so that
a grader killed midway (the container's OOM killer) leaves the tests it graded, and words that
say what happened (``interrupted_result``).  A notebook handed in as a link, or any file that
cannot be opened as a regular file, is ``unreadable``: the student's to fix.  Every text the
submission chose is on one line in the log (``results.one_line``).
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
import traceback
from pathlib import Path

from .results import one_line

__all__ = ["gradescope_result", "find_notebooks", "run", "finish", "interrupted_result", "prepare_results",
           "close_source", "main", "RUN_AUTOGRADER", "SETUP_SH", "TEST_KEYS", "RESULT_KEYS", "SKIP_PARTS"]

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
RESULTS="$ROOT/results"
RESULT="$RESULTS/results.json"
# Only the grader writes results.json: whatever is in the folder now goes, and the folder is made
# again, root's and closed to every other user (a submission runs as one), before anything runs.
rm -rf -- "$RESULTS"
mkdir -p -m 0700 -- "$RESULTS"
cd "$ROOT/source" && PYTHONPATH="$ROOT/source" "$PYTHON" -m graders.autograder --root "$ROOT"
# Whatever became of the grader (killed, say): what is left of the submission's sandboxes ends, and
# results.json is kept only if the grader wrote it (it writes the tests graded so far as it goes).
cd "$ROOT/source" && PYTHONPATH="$ROOT/source" "$PYTHON" -m graders.autograder --root "$ROOT" --finish
# Should the interpreter itself be missing or killed, Gradescope still gets a result that says so.
if [ -L "$RESULT" ] || [ ! -f "$RESULT" ] || [ ! -O "$RESULT" ] || [ ! -s "$RESULT" ]; then
  rm -rf -- "$RESULT"
  mkdir -p -m 0700 -- "$RESULTS"
  printf '%s\\n' '{"score": 0.0, "output": "The autograder could not start: the problem is on the course'"'"'s side, not in your notebook. Your instructor can see what happened.", "stdout_visibility": "hidden", "tests": [], "extra_data": {"status": "grader_error"}}' > "$RESULT"
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
    """Every notebook of a submission folder (sub-folders too), without checkpoints or dot files:
    every entry named ``*.ipynb`` that is not a folder, links included (a link is refused when
    graded, as the student's error, never followed)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*.ipynb")
                  if not _is_folder(p) and not SKIP_PARTS & set(p.relative_to(folder).parts)
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return True


def _files_seen(folder: Path, limit: int = 20) -> str:
    if not folder.is_dir():
        return "no submission folder"
    names = sorted(one_line(p.relative_to(folder)) for p in folder.rglob("*") if not _is_folder(p))
    if not names:
        return "no file at all"
    shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return f"the files handed in: {shown}"


def _zero_result(exercise: str, summary: str, status: str, started: float, extra: dict | None = None) -> dict:
    """Every test of ``exercise`` at 0 with ``summary`` as the reason (the maximum stays right)."""
    from . import registry
    from .results import make_result, test_entry
    try:
        tests = [test_entry(i.name, i.points, False, f"not graded: {summary}", i.visibility)
                 for i in registry.items(exercise)]
    except Exception:  # noqa: BLE001 - the zero result is written even when the tests cannot be listed
        tests = []
    return make_result(exercise=exercise, tests=tests, status=status, isolation="none",
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


def _grade_one(exercise: str, notebooks: list[Path], folder: Path, started: float, partial=None) -> dict:
    """The grader's result for the submission folder: its one notebook graded, or a zero."""
    if not notebooks:
        return _zero_result(exercise, f"no notebook (.ipynb) was handed in ({_files_seen(folder)}); hand in "
                            f"your {exercise} exercise notebook.", "missing", started)
    if len(notebooks) > 1:
        names = ", ".join(one_line(p.relative_to(folder)) for p in notebooks)
        return _zero_result(exercise, f"{len(notebooks)} notebooks were handed in ({names}): hand in only "
                            f"your {exercise} exercise notebook.", "usage_error", started)
    from .grading import UsageError, grade_file
    from .notebook import Refused, open_file
    from .sandbox import SandboxUnavailable
    try:                        # a link, a FIFO, a file that cannot be opened: the student's to fix
        open_file(notebooks[0]).close()
    except Refused as err:
        return _zero_result(exercise, f"your notebook could not be read: {one_line(err)}. Hand in the notebook "
                            "file itself.", "unreadable", started)
    try:
        return grade_file(notebooks[0], exercise, partial=partial)
    except (UsageError, SandboxUnavailable) as err:
        return _zero_result(exercise, f"the notebook could not be graded: {one_line(err)}", "grader_error", started,
                            extra={"grader_problem": str(err)})


#: The words a student reads when the grader was stopped before the end (the results written as
#: the tests were graded are what is left): what happened, what is kept, what to check.
INTERRUPTED = ("The grading stopped before it finished: {graded} of {total} hidden tests were graded and "
               "their scores are kept; the others score 0. The autograder's process was stopped from "
               "outside, which happens most often when a submission uses more memory than the "
               "autograder's machine has: check how much memory your code uses, then submit again. Your "
               "instructor can see what happened.")


def interrupted_result(exercise: str, verdicts: dict, started: float, submission: str = "") -> dict:
    """What results.json holds while grading goes on: the tests judged so far (``verdicts``, by
    test id) with their scores, every other one at 0, "not graded", and the words a student reads
    should the grader be stopped now (status ``interrupted``)."""
    from . import registry
    from .results import make_result, test_entry
    exercise_def, tests = registry.get(exercise), registry.tests(exercise)
    waiting = "not graded: the grading stopped before this test was graded"
    if exercise_def.report is None:
        entries = [test_entry(t.name, t.points, verdicts[t.id].passed, verdicts[t.id].message, t.visibility)
                   if t.id in verdicts else test_entry(t.name, t.points, False, waiting, t.visibility)
                   for t in tests]
    else:                       # entries made of several tests: none counts before the end
        entries = [test_entry(i.name, i.points, False, waiting, i.visibility) for i in registry.items(exercise)]
    graded = sum(t.id in verdicts for t in tests)
    return make_result(exercise=exercise, tests=entries, status="interrupted", isolation="none",
                       execution_time=time.perf_counter() - started, submission=submission,
                       output=INTERRUPTED.format(graded=graded, total=len(tests)))


def run(root: Path, exercise: str | None = None) -> dict:
    """Grade ``root/submission``'s notebook for the pinned exercise and write
    ``root/results/results.json``: first a result that says the grading stopped before any test
    was graded, then, as the tests are graded, one with those tests (``interrupted_result``), at
    the end the whole result, each written atomically; returns what was written last."""
    from .results import write_json
    started = time.perf_counter()
    root = Path(root)
    if exercise is None:
        exercise = _pinned_exercise()
    folder = root / SUBMISSION
    target = root / RESULTS / "results.json"
    notebooks = find_notebooks(folder)
    label = one_line(notebooks[0].relative_to(folder)) if len(notebooks) == 1 else ""

    def partial(verdicts: dict) -> None:
        try:
            write_json(target, gradescope_result(interrupted_result(exercise, verdicts, started, label)))
        except Exception as err:  # noqa: BLE001 - a courtesy for a killed grader; grading goes on
            print(f"(the results so far could not be written: {type(err).__name__}: {err})")

    partial({})
    try:
        result = _grade_one(exercise, notebooks, folder, started, partial)
    except Exception as err:  # noqa: BLE001 - a result is written whatever happens
        result = _zero_result(exercise, "the grader failed", "grader_error", started,
                              extra={"grader_traceback": traceback.format_exc()[-4000:]})
        result["output"] = f"The grader itself failed ({type(err).__name__}: {one_line(err)})."
    if label:
        result["submission"] = label
    graded = gradescope_result(result)
    write_json(target, graded)
    _log(result, graded)
    return graded


def _pinned_exercise() -> str:
    return json.loads((Path(__file__).resolve().parent.parent / "exercise.json").read_text(encoding="utf-8"))["exercise"]


def _log(result: dict, graded: dict) -> None:
    """The instructor's log (run_autograder's standard output): the feedback as ``grade`` prints
    it (the isolation that held included), what went wrong in the grader, the score written.
    Every text a submission chose is on one line there (``results.one_line``)."""
    from .results import format_text
    try:
        print(format_text(result))
    except Exception as err:  # noqa: BLE001 - the log is a courtesy; results.json is what counts
        print(f"(the feedback could not be printed: {type(err).__name__})")
    for key in ("grader_problem", "grader_traceback"):
        if result.get(key):
            print(f"{key}: {one_line(result[key])}")
    print(f"results.json: score {graded['score']:g} of {sum(t['max_score'] for t in graded['tests']):g}")


#: The grader's list of the user ids its sandboxes ran as, in the results folder (closed to
#: other users) while it grades; ``finish`` reads it and removes it.
USERS_FILE = ".sandbox-users"


def prepare_results(root: Path) -> Path:
    """The results folder as the grader needs it before anything of the submission runs: there,
    root's (the grader's), closed to every other user, and empty (run_autograder made it so; a
    folder it could not replace, a mount point, is emptied here)."""
    folder = Path(root) / RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(folder, 0, 0)
    os.chmod(folder, 0o700)
    for entry in os.scandir(folder):
        _remove(Path(entry.path))
    return folder


def _remove(path: Path) -> None:
    import shutil
    try:
        if _is_folder(path) and os.path.lexists(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _ours(path: Path) -> bool:
    """Whether ``path`` is a file the grader wrote: a regular file of this user's, with no other
    name, not empty."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_nlink == 1 and info.st_size > 0


def finish(root: Path, exercise: str | None = None) -> list[str]:
    """After the grader, whatever became of it (run_autograder's ``--finish``): every process the
    sandboxes' users still have is killed and their files in the shared folders removed (the
    grader does it after each run, unless it was killed); results.json is kept only if it is the
    grader's (a regular file of this user's), else replaced by a result that says the grader could
    not grade; nothing else is left in the folder.  Returns what it did, for the log."""
    from .sandbox.guard import watched_folders
    from .sandbox.sweep import sweep_files, sweep_processes
    from .results import write_json
    folder = Path(root) / RESULTS
    said = []
    users = folder / USERS_FILE
    uids = set()
    if _ours(users):
        uids = {int(word) for word in users.read_text().split() if word.isdigit() and int(word) >= 100_000}
    for uid in sorted(uids):
        sweep_processes(uid=uid)
        removed = sweep_files(uid, watched_folders())
        if removed:
            said.append(f"removed {removed} files left by the sandbox's user {uid}")
    target = folder / "results.json"
    for entry in (list(os.scandir(folder)) if folder.is_dir() else []):
        if entry.name != target.name:
            _remove(Path(entry.path))
    if not _ours(target):
        if os.path.lexists(target):
            said.append("results.json was not the grader's: removed")
        _remove(target)
        result = _zero_result(exercise or _pinned_exercise(), "the grader stopped before it could grade",
                              "grader_error", time.perf_counter())
        write_json(target, gradescope_result(result))
        said.append("the grader wrote no result: results.json says it could not grade")
    else:
        try:
            status = json.loads(target.read_text(encoding="utf-8")).get("extra_data", {}).get("status")
        except (OSError, ValueError, AttributeError):
            status = None
        if status == "interrupted":
            said.append("the grader was stopped before the end: results.json holds the tests graded until then")
    return said


def main(argv: list[str] | None = None) -> int:
    """``run_autograder``'s entry point: grade the submission under ``--root`` (``--finish``:
    what run_autograder does after the grader, whatever became of it)."""
    parser = argparse.ArgumentParser(prog="python -m graders.autograder",
                                     description="Grade a Gradescope submission (run by run_autograder).")
    parser.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"),
                        help="Gradescope's folder: submission/ is read, results/results.json written")
    parser.add_argument("--finish", action="store_true",
                        help="after the grader: end what its sandboxes left, keep only the grader's results.json")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.finish:
        for line in finish(root):
            print(f"run_autograder: {line}")
        return 0
    from .sandbox.probes import USERS_LOG
    folder = prepare_results(root)
    os.environ[USERS_LOG] = str(folder / USERS_FILE)
    close_source()
    run(root)
    return 0


def close_source() -> list[str]:
    """Make this package's source folder (the grader, its references) unreadable to other
    users before grading, so that the sandbox's weakest fallback (no bubblewrap, no util-linux:
    the submission as a user of its own, with the machine's files in view) finds it closed and
    grades.  Only a root grader in a built package (``exercise.json`` beside ``graders/``) does
    it: the files are its own there.  The interpreter and the packages the sandbox needs stay
    readable.  Returns what was closed."""
    from .sandbox.interpreter import python_roots
    from .sandbox.exposure import close_to_others, gradescope_source
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
