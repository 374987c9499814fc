"""The weakest fallback (no bubblewrap, no util-linux: the subreaper and a user id of the run's
own, the machine's files in view) never lets a submission read the course's answers or the
grader's references.

Each grader here is root, in a private mount namespace where its interpreter is open to every
user (``test_fallback.AS_USER``), with bubblewrap and util-linux off its ``PATH``.  The
attacks read ``solutions/attend_step.ipynb`` and import ``graders/exercises/attend_step.py``'s
reference by absolute path.  On the checkout as it is (umask 022: readable by everyone) the
grader refuses before anything runs; with those folders closed to other users (covered, in the
namespace only, by a 0700 tmpfs holding their entries bound back: the grader, root, still reads
them) the attacks get 0 and a correct answer full marks.  The same through ``run_autograder`` of
a built package, which closes its own source folder.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from grader_helpers import GOOD, PYTHON, ROOT
from test_fallback import ANSWER_FOLDERS, AS_USER

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare to open the interpreter to other users")

CLI = "import sys; from graders.cli import main; sys.exit(main(sys.argv[1:]))"

# Two attacks: the course's answer, run from its notebook; the hidden tests' own reference.  Both
# load it when called (the grader keeps only a submission's definitions and imports).
FROM_SOLUTIONS = """
import json
def _load():
    nb = json.load(open("__ROOT__/solutions/attend_step.ipynb"))
    namespace = {}
    exec("\\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"), namespace)
    return namespace["attend_step"]
def attend_step(x_t, cache, p):
    try:
        answer = _load()
    except Exception as err:
        raise RuntimeError("no answer within reach: " + repr(err))
    return answer(x_t, cache, p)
"""
FROM_REFERENCE = """
import sys
def _load():
    sys.path.insert(0, "__ROOT__")
    from graders.exercises.attend_step import step
    def answer(x_t, cache, p):
        out, keys, values = step(x_t, cache, p)
        return out, {"k": keys, "v": values}
    return answer
def attend_step(x_t, cache, p):
    try:
        answer = _load()
    except Exception as err:
        raise RuntimeError("no answer within reach: " + repr(err))
    return answer(x_t, cache, p)
"""
ATTACKS = {"solutions": FROM_SOLUTIONS, "reference": FROM_REFERENCE}


def _attack(kind: str, root: Path) -> str:
    return textwrap.dedent(ATTACKS[kind]).replace("__ROOT__", str(root))


def _as_root(args: list[str], close: list[Path], path: str, env: dict | None = None,
             cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python ARGS`` as root with the interpreter open to every user, ``close`` closed to them,
    ``PATH`` set to ``path`` (no bubblewrap, no util-linux there)."""
    cmd = [shutil.which("unshare"), "--mount", PYTHON, "-c", AS_USER, "0", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {}), "PATH": path, "PYTHONPATH": str(ROOT),
                               "CLOSE_UP": json.dumps([str(f) for f in close])})


def _grade(tmp_path: Path, source: str, close: list[Path]) -> tuple[subprocess.CompletedProcess, dict]:
    sub = tmp_path / "attend_step.py"
    sub.write_text(source)
    out = tmp_path / "r.json"
    out.unlink(missing_ok=True)
    proc = _as_root(["-c", CLI, "grade", str(sub), "--exercise", "attend_step", "--isolation", "subprocess",
                     "--json", str(out)], close, "/nonexistent-bin")
    return proc, (json.loads(out.read_text()) if out.exists() else {})


@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_each_attack_scores_when_it_can_read_the_checkout(kind):
    """The attacks are real: run beside the checkout, each finds the answer and it is right."""
    import numpy as np
    namespace: dict = {}
    exec(_attack(kind, ROOT), namespace)
    exec(textwrap.dedent(GOOD["attend_step"]), good := {})
    rng = np.random.default_rng(3)
    p = {name: rng.standard_normal((4, 4)) for name in ("Wq", "Wk", "Wv")}
    cache = {"k": rng.standard_normal((2, 4)), "v": rng.standard_normal((2, 4))}
    x = rng.standard_normal(4)
    got, want = namespace["attend_step"](x, cache, p), good["attend_step"](x, cache, p)
    assert np.allclose(got[0], want[0]) and np.allclose(got[1]["k"], want[1]["k"])


def test_a_world_readable_checkout_is_refused_before_anything_runs(tmp_path):
    """The checkout as cloned (every folder readable by others): ``grade`` exits 2 naming the
    folder another user can read and the remedy; no result that looks like a grade."""
    proc, result = _grade(tmp_path, _attack("solutions", ROOT), close=[])
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert "chmod o-rwx" in proc.stderr and "Traceback" not in proc.stderr
    assert any(f"can read {ROOT / name}" in proc.stderr for name in ("solutions", "graders", "ga2"))
    assert "bubblewrap" in proc.stderr and "util-linux" in proc.stderr
    assert result["status"] == "usage_error" and result["score"] == 0


def test_one_folder_left_readable_is_named(tmp_path):
    """solutions/ and ga2/ closed, graders/ left open: the refusal names graders/."""
    proc, _ = _grade(tmp_path, _attack("reference", ROOT), close=[ROOT / "solutions", ROOT / "ga2"])
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert f"can read {ROOT / 'graders'} (" in proc.stderr and f"chmod o-rwx {ROOT / 'graders'}" in proc.stderr


def test_with_the_folders_closed_the_attacks_get_nothing_and_an_answer_full_marks(tmp_path):
    closed = [ROOT / name for name in ANSWER_FOLDERS]
    for kind in sorted(ATTACKS):
        proc, result = _grade(tmp_path, _attack(kind, ROOT), closed)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert result["score"] == 0 and result["max_score"] > 0, (kind, result.get("output"))
        assert "no answer within reach" in json.dumps(result["tests"])
        held = result["isolation_held"]
        assert held["subreaper"] and held["own_user"] and not held["file_view"] and held["answers_closed"]
        assert "unreadable to its user" in result["isolation_detail"]
    proc, result = _grade(tmp_path, textwrap.dedent(GOOD["attend_step"]), closed)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result["score"] == result["max_score"] > 0, result.get("output")


# ------------------------------------------------------------------------------- Gradescope


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    out = tmp_path_factory.mktemp("autograder-zip")
    proc = subprocess.run([PYTHON, "-m", "graders", "autograder", "attend_step", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return out / "attend_step.zip"


def _other_ga2() -> list[str]:
    """The ``ga2`` this interpreter imports outside the checkout (an editable install of another
    checkout, say): a package without ``ga2`` of its own would import it, so the grader checks it
    too; this machine's is closed (in the namespace only) for the package's run."""
    proc = subprocess.run([PYTHON, "-I", "-c", "import importlib.util as u; s = u.find_spec('ga2'); "
                           "print(list(s.submodule_search_locations)[0] if s else '')"],
                          capture_output=True, text=True, cwd="/", timeout=60)
    found = proc.stdout.strip()
    return [os.path.realpath(found)] if found else []


def _gradescope(package: Path, notebook_source: str | None, raw: bytes | None = None) -> tuple[dict, Path, str]:
    """The package unzipped as Gradescope does, in a folder every user can reach (as
    /autograder is), one notebook handed in, ``run_autograder`` run as root with no bubblewrap
    and no util-linux; (results.json, the source folder, the log)."""
    top = Path(tempfile.mkdtemp(prefix="gradescope-", dir="/tmp"))
    try:
        top.chmod(0o755)
        root = top / "autograder"
        with zipfile.ZipFile(package) as archive:
            archive.extractall(root / "source")
        for folder, dirs, files in os.walk(root):     # as unzipped with umask 022
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
        (root / "run_autograder").chmod(0o755)
        (root / "submission").mkdir()
        data = raw if raw is not None else json.dumps({
            "cells": [{"cell_type": "code", "metadata": {"tags": ["answer"]}, "source": notebook_source,
                       "outputs": [], "execution_count": None}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
        (root / "submission" / "attend_step.ipynb").write_bytes(data)
        tools = top / "bin"              # what run_autograder itself calls, and nothing of the sandbox's
        tools.mkdir()
        for tool in ("bash", "rm", "mkdir"):
            os.symlink(shutil.which(tool), tools / tool)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_")}
        proc = subprocess.run([shutil.which("unshare"), "--mount", PYTHON, "-c", AS_USER, "0",
                               "-c", "import os, sys; os.execv(sys.argv[1], sys.argv[1:])",
                               str(root / "run_autograder")],
                              cwd=top, capture_output=True, text=True, timeout=300,
                              env={**env, "PATH": str(tools), "AUTOGRADER_ROOT": str(root),
                                   "AUTOGRADER_PYTHON": PYTHON, "CLOSE_UP": json.dumps(_other_ga2())})
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads((root / "results" / "results.json").read_text())
        return result, os.stat(root / "source").st_mode, proc.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_run_autograder_closes_its_source_and_the_fallback_grades_there(package):
    """In the package's own layout, a world-readable unzip: ``run_autograder`` closes
    ``source/`` to other users, so the weakest fallback grades; the reference attack (by the
    package's own path) gets 0 and the course's answer full marks."""
    source_of = "/tmp/gradescope-"      # the attack finds its source folder from its own path
    attack = textwrap.dedent(FROM_REFERENCE).replace(
        '"__ROOT__"', 'next(str(p) for p in __import__("pathlib").Path("/tmp").glob('
                      f'"{source_of}*/autograder/source"))')
    result, mode, log = _gradescope(package, attack)
    assert mode & 0o007 == 0, oct(mode)
    assert result["score"] == 0 and result["tests"], log[-2000:]
    extra = result["extra_data"]
    assert extra["status"] != "grader_error", log[-2000:]
    assert "no answer within reach" in log or "no answer within reach" in json.dumps(result)
    solution = (ROOT / "solutions" / "attend_step.ipynb").read_bytes()
    result, _, log = _gradescope(package, None, raw=solution)
    assert result["score"] == sum(t["max_score"] for t in result["tests"]) > 0, log[-2000:]
    assert "unreadable to its user" in log


def test_batch_refuses_the_class_and_check_exits_2_when_an_answer_is_readable(tmp_path):
    """The checkout as it is: ``batch`` refuses the class before grading anyone (no gradebook),
    ``check`` exits 2, each naming a folder another user can read."""
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "a.py").write_text(_attack("solutions", ROOT))
    gradebook = tmp_path / "gb.csv"
    for args in (["batch", str(tmp_path / "class"), "--exercise", "attend_step", "--out", str(gradebook)],
                 ["check", str(tmp_path / "class" / "a.py"), "--exercise", "attend_step"]):
        proc = _as_root(["-c", CLI, *args], [], "/nonexistent-bin")
        assert proc.returncode == 2, (args[0], proc.stdout + proc.stderr[-2000:])
        assert "chmod o-rwx" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert not gradebook.exists()
