"""tools/site_exercises.py and tools/site_runtime.py: what an exercise page ships to the browser.

The course's packages go in the learner's copy's form (no answer, no grader, no hidden test; the
leak scan reads the zip and finds an answer planted in it), each exercise's page data is its
notebook, and the runtime's module and library are cut as their docstrings say.  The pages
themselves, in Chromium, are tests/site/test_exercise_pages.py."""
from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import pytest

from course import catalogue as registry
from coursetools.answer_leaks import find_leaks

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import site_exercises  # noqa: E402
import site_runtime  # noqa: E402


@pytest.fixture(scope="module")
def course_zip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("site") / "course.zip"
    path.write_bytes(site_exercises.course_zip())
    return path


def test_the_zip_holds_the_checks_and_ga2_as_the_learner_s_copy_has_them(course_zip):
    names = zipfile.ZipFile(course_zip).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"public_checks", "ga2", "course"}          # course: the catalogue ga2 reads
    assert "public_checks/browser.py" in names and "public_checks/data/softmax.json" in names
    assert not any(n.startswith(("ga2/rtl/", "ga2/mutants")) for n in names)    # module counterparts: left out
    quant = zipfile.ZipFile(course_zip).read("ga2/quant.py").decode()
    assert "raise NotImplementedError" in quant.split("def requant(", 1)[1].split("\ndef ", 1)[0]
    assert find_leaks(course_zip) == []


def test_the_leak_scan_finds_an_answer_put_into_the_zip(course_zip, tmp_path):
    solution = json.loads((ROOT / "solutions" / "softmax.ipynb").read_text())
    answer = "".join(next(c for c in solution["cells"] if "answer" in c.get("metadata", {}).get("tags", []))["source"])
    planted = tmp_path / "course.zip"
    out = io.BytesIO()
    with zipfile.ZipFile(course_zip) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        target.writestr("public_checks/helpers.py", answer)
    planted.write_bytes(out.getvalue())
    leaks = find_leaks(tmp_path)
    assert [(leak.file, leak.name) for leak in leaks] == [("course.zip:public_checks/helpers.py", "softmax")]


@pytest.mark.parametrize("name", registry.names())
def test_each_page_reads_its_notebook_with_what_the_page_needs_in_its_metadata(name):
    nb = site_exercises.exercise_data(name)
    page = nb["metadata"]["kvcourse"]["page"]
    assert page["functions"] == list(registry.get(name).functions)
    checks = "".join(nb["cells"][page["checks_cell"]]["source"])
    assert f'run_checks("{name}"' in checks
    assert all(c.get("outputs") == [] for c in nb["cells"] if c["cell_type"] == "code")
    starter = site_exercises.starter(nb)
    assert "NotImplementedError" in starter
    expected = {"attention_tail": ["requant"], "mutants": ["requant", "attention_tail"]}.get(name, [])
    assert page["installs"] == expected
    assert find_leaks_in_notebook(nb, name) == []


def find_leaks_in_notebook(nb, name):
    from coursetools.answer_leaks import leaks_in_notebook
    return leaks_in_notebook(nb, f"{name}.ipynb")


def test_the_driver_prints_what_the_notebook_prints(tmp_path, monkeypatch, capsys, course_modules_kept):
    """public_checks.browser.run, in this Python: the answer cell then the checks cell, the report
    of run_checks unchanged, an error in the answer shown as Python shows it."""
    from public_checks import browser, run_checks
    nb = site_exercises.exercise_data("softmax")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checks.py").write_text("".join(nb["cells"][nb["metadata"]["kvcourse"]["page"]["checks_cell"]]["source"]))
    wrong = "import numpy as np\n\ndef softmax(s):\n    e = np.exp(s)\n    return e / e.sum(axis=-1, keepdims=True)\n"
    (tmp_path / "answer.py").write_text(wrong)
    browser.run("softmax")
    shown = capsys.readouterr().out
    namespace: dict = {}
    exec(wrong, namespace)
    with pytest.raises(AssertionError):
        run_checks("softmax", namespace["softmax"])
    assert shown == capsys.readouterr().out and "[FAIL] stable for huge scores" in shown
    (tmp_path / "answer.py").write_text("def softmax(s):\n    return s +\n")
    browser.run("softmax")
    shown = capsys.readouterr().out
    assert shown.startswith('  File "your code", line 2') and shown.rstrip().endswith("SyntaxError: invalid syntax")


def test_the_module_loses_its_names_and_gets_a_memory_cap():
    def section(sid: int, payload: bytes) -> bytes:
        return bytes([sid]) + site_runtime._encode_leb128(len(payload)) + payload

    def custom(name: str, payload: bytes) -> bytes:
        return section(0, site_runtime._encode_leb128(len(name)) + name.encode() + payload)

    module = (b"\0asm\x01\0\0\0" + section(5, b"\x01\x00\x80\x05") + custom("name", b"x" * 300)
              + custom("producers", b"abc"))
    stripped = site_runtime.strip_module(module, memory_pages=1000)
    kinds = [(sid, name) for sid, _, _, _, name in site_runtime.sections(stripped)]
    assert kinds == [(5, None), (0, "producers")]
    memory = next(stripped[s:e] for sid, _, s, e, _ in site_runtime.sections(stripped) if sid == 5)
    assert memory == b"\x01\x01\x80\x05" + site_runtime._encode_leb128(1000)
    with pytest.raises(site_runtime.RuntimeBuildError):
        site_runtime.strip_module(module, memory_pages=100)          # starts above the cap


@pytest.mark.parametrize("member, kept", [
    ("os.pyc", True), ("encodings/utf_8.pyc", True), ("_pydecimal.pyc", True), ("decimal.pyc", True),
    ("annotationlib.pyc", True), ("numpy/_core/numeric.pyc", True), ("numpy/linalg/linalg.pyc", True),
    ("numpy/_core/tests/test_api.pyc", False), ("numpy/f2py/crackfortran.pyc", False),
    ("test/test_os.pyc", False), ("idlelib/idle.pyc", False), ("tkinter/__init__.pyc", False),
    ("asyncio/events.pyc", False), ("http/client.pyc", False), ("urllib/request.pyc", False),
    ("urllib/parse.pyc", True), ("pandas/__init__.pyc", False), ("scipy/linalg/__init__.pyc", False),
    ("numpy-2.5.2.dist-info/METADATA", False), ("six.pyc", False), ("profiling/sampling/x.js", False),
])
def test_the_library_keeps_the_standard_library_and_numpy(member, kept):
    assert site_runtime.keeps(member) is kept
