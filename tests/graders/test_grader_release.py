"""``make release`` (python -m graders release): the learner's copy, without solutions or graders."""
import json
import shutil
import subprocess
import textwrap

import pytest

from graders.answer_leaks import describe, find_leaks, graded_functions
from graders.release import ReleaseError, make_release

from grader_helpers import PYTHON, ROOT


def test_the_release_has_exercises_and_checks_and_nothing_secret(tmp_path):
    out = tmp_path / "release"
    proc = subprocess.run([PYTHON, "-m", "graders", "release", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    names = {p.relative_to(out).parts[0] for p in out.rglob("*")}
    assert {"exercises", "public_checks", "README.md", "MANIFEST.txt", "pyproject.toml"} <= names
    assert not any(part in ("solutions", "graders") for p in out.rglob("*") for part in p.relative_to(out).parts)
    exercises = sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    assert sorted(p.name for p in (out / "exercises").glob("*.ipynb")) == exercises
    for nb_path in (out / "exercises").glob("*.ipynb"):
        nb = json.loads(nb_path.read_text())
        assert all(c.get("outputs", []) == [] for c in nb["cells"] if c["cell_type"] == "code")
    assert (out / "public_checks" / "__init__.py").exists()
    if (ROOT / "_build" / "html" / "index.html").exists():
        assert (out / "book" / "index.html").exists()
        assert "book: the built site" in proc.stdout
    else:
        assert "the site is not built" in proc.stdout and (out / "BOOK-NOT-INCLUDED.txt").exists()
    hidden = {p.read_bytes() for p in (ROOT / "graders" / "exercises").glob("*.py")}
    assert not any(p.is_file() and p.read_bytes() in hidden for p in out.rglob("*.py"))
    # no implementation of a graded function anywhere: Python files, notebook cells and outputs,
    # the pages of the site; the engine is not shipped, and the checks come with their data
    leaks = find_leaks(out)
    assert not leaks, describe(leaks)
    assert not (out / "kvcache").exists() and not (out / "coursebook").exists() and not (out / "tools").exists()
    # public_checks, and ga2: the mutants exercise and its checks run GA-2's program builder
    assert "packages: public_checks, ga2\n" in proc.stdout + "\n" and (out / "ga2" / "machine.py").exists()
    data = sorted(p.stem for p in (out / "public_checks" / "data").glob("*.json"))
    assert data == sorted(json.loads(nb.read_text())["metadata"]["kvcourse"]["exercise"]
                          for nb in (out / "exercises").glob("*.ipynb"))
    assert 'public_checks = ["data/*.json"]' in (out / "pyproject.toml").read_text()
    # A second release replaces the first.
    proc = subprocess.run([PYTHON, "-m", "graders", "release", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _fake_course(root):
    for folder in ("exercises", "solutions", "public_checks", "graders"):
        (root / folder).mkdir(parents=True)
    (root / "public_checks" / "__init__.py").write_text("# checks\n")
    (root / "graders" / "secret.py").write_text("HIDDEN = 'the hidden tests of this fake course: long enough to be hashed, really, truly'\n")

    def nb(source, tags):
        return json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": tags}, "source": source,
                                      "outputs": [{"output_type": "stream", "text": "x"}], "execution_count": 3}],
                           "metadata": {"kvcourse": {"exercise": "f", "chapter": 1}}, "nbformat": 4, "nbformat_minor": 5})
    return nb


def test_a_solution_leaked_into_an_exercise_stops_the_release(tmp_path):
    root = tmp_path / "course"
    nb = _fake_course(root)
    answer = "def f(x):\n    return 2 * x\n"
    (root / "solutions" / "f.ipynb").write_text(nb(answer, ["answer"]))
    (root / "exercises" / "f.ipynb").write_text(nb(answer, ["answer"]))
    with pytest.raises(ReleaseError, match="refusing to release a solution"):
        make_release(tmp_path / "out", root=root)
    assert not (tmp_path / "out").exists()
    (root / "exercises" / "f.ipynb").write_text(nb("def f(x):\n    raise NotImplementedError\n", ["answer"]))
    report = make_release(tmp_path / "out", root=root)
    assert (tmp_path / "out" / "exercises" / "f.ipynb").exists() and "release written" in report[-1]


def test_a_copy_of_a_hidden_file_stops_the_release(tmp_path):
    root = tmp_path / "course"
    _fake_course(root)
    shutil.copy(root / "graders" / "secret.py", root / "public_checks" / "oops.py")
    with pytest.raises(ReleaseError, match="copy of a file of solutions/ or graders/"):
        make_release(tmp_path / "out", root=root)


def test_the_release_never_overwrites_the_sources(tmp_path):
    root = tmp_path / "course"
    _fake_course(root)
    for target in (root, root / "exercises", root / "solutions" / "x"):
        with pytest.raises(ReleaseError, match="overlaps"):
            make_release(target, root=root)
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("do not delete")
    with pytest.raises(ReleaseError, match="not a release"):
        make_release(tmp_path / "precious", root=root)
    assert (tmp_path / "precious" / "thesis.tex").exists()


def test_the_released_checks_run_without_the_course(tmp_path):
    """The learner's copy on its own: its public checks import nothing of the course (the engine,
    the grader and the book's helpers are made unimportable) and grade a right answer, a
    starter and a wrong one."""
    out = tmp_path / "release"
    make_release(out, root=ROOT)
    code = textwrap.dedent(f"""
        import sys
        sys.path = [p for p in sys.path if p not in ("", {str(ROOT)!r})]
        sys.path.insert(0, {str(out)!r})
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("kvcache", "graders", "coursebook", "solutions", "tools"):
                    raise ImportError("not in the learner's copy: " + name)
        sys.meta_path.insert(0, Block())
        import numpy as np
        from public_checks import evaluate
        import public_checks
        assert public_checks.__file__.startswith({str(out)!r}), public_checks.__file__

        def softmax(s):
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        def starter(s):
            raise NotImplementedError

        print(sorted({{o.status for o in evaluate("softmax", softmax)}}))
        print(sorted({{o.status for o in evaluate("softmax", starter)}}))
        print(sorted({{o.status for o in evaluate("kv_cache_bytes", lambda L, G, d, T, b: L * G * d * T * b)}}))
    """)
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["['passed']", "['not implemented']", "['failed', 'passed']"]


def test_an_answer_anywhere_in_the_copy_stops_the_release(tmp_path):
    """An exercise that imports a package implementing a graded function (an engine), or a public
    check that implements one, stops the release: nothing is written."""
    graded = sorted(graded_functions())[0]
    root = tmp_path / "course"
    nb = _fake_course(root)
    (root / "engine").mkdir()
    (root / "engine" / "__init__.py").write_text(f"def {graded}(*args):\n    return 42\n")
    (root / "exercises" / "f.ipynb").write_text(nb("import engine\n\ndef f(x):\n    raise NotImplementedError\n",
                                                   ["answer"]))
    with pytest.raises(ReleaseError, match="implementation of a graded function") as err:
        make_release(tmp_path / "out", root=root)
    assert f"engine/__init__.py: line 1: {graded}" in str(err.value)
    assert not (tmp_path / "out").exists()
    (root / "exercises" / "f.ipynb").write_text(nb("def f(x):\n    raise NotImplementedError\n", ["answer"]))
    (root / "public_checks" / "f.py").write_text(f"def {graded}(x):\n    return x\n")
    with pytest.raises(ReleaseError, match="public_checks/f.py"):
        make_release(tmp_path / "out", root=root)
    (root / "public_checks" / "f.py").write_text(f"def {graded}(x):\n    raise NotImplementedError\n")
    assert "release written" in make_release(tmp_path / "out", root=root)[-1]
