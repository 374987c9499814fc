"""coursetools.answer_leaks: a definition of a graded function anywhere a learner reads it must be a
starter.  The graded names come from the course's catalogue, so a new exercise is covered the day
it is listed there; the built site and the release are scanned by tests/site and
tests/coursetools/test_release.py with the same function."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course import catalogue
from coursetools.answer_leaks import (counterparts, find_leaks, graded_functions, leaks_in_html,
                                      leaks_in_notebook, leaks_in_source, leaks_in_text, protected_names)
from graders import registry

ROOT = Path(__file__).resolve().parents[2]
NAMES = frozenset({"softmax", "attend_step"})


def test_the_graded_names_are_the_registry_s():
    expected = {fn for name in registry.names() for fn in registry.get(name).functions}
    assert graded_functions() == expected
    assert {"softmax", "causal_attention", "attend_step", "kv_cache_bytes", "max_batch", "arithmetic_intensity",
            "time_per_token", "prefill_time"} <= expected


STARTERS = [
    'def softmax(scores):\n    raise NotImplementedError\n',
    'def softmax(scores):\n    """Doc."""\n    raise NotImplementedError("write softmax here")\n',
    'async def softmax(scores):\n    raise NotImplementedError()\n',
    'def other(x):\n    return 2 * x\n',                          # not a graded name
]
ANSWERS = [
    'def softmax(s):\n    e = np.exp(s - s.max())\n    return e / e.sum()\n',
    'def softmax(s):\n    """Doc."""\n    x = 1\n    raise NotImplementedError\n',   # code before the raise
    'def softmax(s):\n    pass\n',
    'class Engine:\n    def softmax(self, s):\n        return s\n',
    'def outer():\n    def attend_step(x, c, p):\n        return x, c\n    return attend_step\n',
    'softmax = lambda s: s / s.sum()\n',
    'softmax: object = lambda s: s\n',
]


@pytest.mark.parametrize("source", STARTERS)
def test_starters_and_other_functions_pass(source):
    assert leaks_in_source(source, "f.py", names=NAMES) == []


@pytest.mark.parametrize("source", ANSWERS)
def test_implementations_are_found(source):
    leaks = leaks_in_source(source, "f.py", names=NAMES)
    assert leaks and leaks[0].name in NAMES and leaks[0].file == "f.py"


def test_text_that_is_not_a_program():
    printed = ("some output\n>>> x = 3\ndef softmax(scores, axis=-1):\n    s = np.asarray(scores)\n"
               "    return s / s.sum()\n\nmore output {\n")
    leaks = leaks_in_text(printed, "page", names=NAMES)
    assert [(leak.name, leak.where) for leak in leaks] == [("softmax", "line 3")]
    signature = "The function to write:\ndef attend_step(x_t, cache, p):\n\nand then prose ("
    assert leaks_in_text(signature, "page", names=NAMES) == []
    multi_line = "def attend_step(x_t,\n                cache, p):\n    raise NotImplementedError\n}"
    assert leaks_in_text(multi_line, "page", names=NAMES) == []
    broken = "def softmax(s):\n    return (s\n"
    assert "cannot be read" in leaks_in_text(broken, "page", names=NAMES)[0].reason
    assert leaks_in_source("%timeit softmax(x)\ndef softmax(s):\n    return s\n", "cell", names=NAMES)


def test_notebooks_cells_fences_and_outputs():
    nb = {"cells": [
        {"cell_type": "code", "source": ["def softmax(s):\n", "    raise NotImplementedError\n"], "outputs": []},
        {"cell_type": "markdown", "source": "The statement:\n\n```python\ndef attend_step(x_t, cache, p):\n```\n"},
        {"cell_type": "code", "source": "show(f)", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "def attend_step(x, cache, p):\n    return 1\n"}]},
        {"cell_type": "markdown", "source": "~~~\ndef softmax(s):\n    return s\n~~~\n"},
    ]}
    leaks = leaks_in_notebook(nb, "nb.ipynb", names=NAMES)
    assert [(leak.name, leak.where.split(",")[0]) for leak in leaks] == [("attend_step", "cell 2"), ("softmax", "cell 3")]


def test_html_pre_blocks_with_highlighting():
    page = ('<p>def softmax(s): in prose is not code</p><div class="highlight"><pre><span></span>'
            '<span class="k">def</span> <span class="nf">softmax</span><span class="p">(</span>s<span class="p">):</span>\n'
            '    <span class="k">return</span> s &gt; 0\n</pre></div>'
            '<pre>def attend_step(x_t, cache, p):\n    raise NotImplementedError\n</pre>')
    leaks = leaks_in_html(page, "p.html", names=NAMES)
    assert [(leak.name, leak.where) for leak in leaks] == [("softmax", "<pre> block 1, line 1")]


def test_find_leaks_in_a_folder(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text(STARTERS[0])
    (tmp_path / "pkg" / "bad.py").write_text(ANSWERS[0])
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": ANSWERS[2]}]}))
    (tmp_path / "broken.ipynb").write_text("{not json")
    (tmp_path / "notes.md").write_text("```\n" + ANSWERS[5] + "```\n")
    (tmp_path / "data.json").write_text(json.dumps({"x": ANSWERS[0]}))     # data, not code: not read
    found = {(leak.file, leak.name) for leak in find_leaks(tmp_path, NAMES)}
    assert found == {("pkg/bad.py", "softmax"), ("nb.ipynb", "softmax"), ("broken.ipynb", "?"), ("notes.md", "softmax")}
    assert [leak.file for leak in find_leaks(tmp_path / "pkg" / "bad.py", NAMES)]


def test_what_learners_get_has_no_answer_and_the_engine_has_them_all():
    for folder in ("exercises", "public_checks", "book", "coursebook"):
        assert find_leaks(ROOT / folder) == [], folder
    # the scanner sees the engine's and the solutions' implementations: every graded name, once each
    # (it reads functions; the graded class BlockAllocator is guarded, the same way, by
    # tests/graders/test_block_allocator_exercise.py)
    classes = {"BlockAllocator"}
    assert {leak.name for leak in find_leaks(ROOT / "solutions")} == graded_functions() - classes
    # the engines (kvcache, ga2) and the chapters' reference implementations (lessons) implement
    # every graded function but those of mutants, whose answer is the learner's own test of the
    # engine (a prediction and a check): nothing to implement there
    engines = find_leaks(ROOT / "kvcache") + find_leaks(ROOT / "lessons") + find_leaks(ROOT / "ga2")
    assert {leak.name for leak in engines} == graded_functions() - classes - {"predict_catches", "check_builder"}


def test_every_counterpart_exists_where_it_is_declared():
    """A counterpart names a real function (or module) of the course's packages, so that the
    release and the pages guard what is really there; each function counterpart is found as a
    leak in its own file and nowhere a learner reads."""
    import importlib
    parts = counterparts()
    assert {"ga2.quant:requant", "ga2.attn:attention_tail", "ga2.rtl", "ga2.mutants"} <= {c.spec for c in parts}
    for part in parts:
        module = importlib.import_module(part.module)
        if part.qualname:
            target = module
            for attr in part.qualname.split("."):
                target = getattr(target, attr)
            assert callable(target), part.spec
            path = Path(module.__file__)
            assert any(leak.name == part.name for leak in find_leaks(path)), part.spec
        assert registry.get(part.exercise).chapter == part.chapter
    assert protected_names() == graded_functions() | {c.name for c in parts if c.qualname}


def test_a_counterpart_with_another_name_is_a_leak_too(monkeypatch):
    """An engine function that implements an answer under its own name is guarded by that name."""
    fake = catalogue.Entry("fake", 9, "A fake", ("answer_fn",), counterparts=("engine.kernel:helper_impl",))
    monkeypatch.setattr(catalogue, "EXERCISES", catalogue.EXERCISES + (fake,))
    assert {"answer_fn", "helper_impl"} <= protected_names()
    assert [leak.name for leak in leaks_in_source("def helper_impl(x):\n    return x\n", "k.py")] == ["helper_impl"]
    assert leaks_in_source("def helper_impl(x):\n    raise NotImplementedError\n", "k.py") == []


def _zip(members: dict) -> bytes:
    import io
    import zipfile
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return out.getvalue()


def test_what_the_exercise_pages_ship_is_read_inside_archives(tmp_path):
    """The site's exercise pages ship course.zip and a gzipped library zip: their members are read
    as the files they are, and a compiled module that names a graded function is a leak."""
    import gzip
    (tmp_path / "course.zip").write_bytes(_zip({"pkg/ok.py": STARTERS[0], "pkg/bad.py": ANSWERS[0],
                                                "pkg/data.json": json.dumps({"x": ANSWERS[0]})}))
    (tmp_path / "library.zip.gz").write_bytes(gzip.compress(_zip({"inner/bad.py": ANSWERS[4],
                                                                  "mod.pyc": b"\x00\x07softmax\x00",
                                                                  "fine.pyc": b"\x00other\x00"})))
    (tmp_path / "nested.zip").write_bytes(_zip({"deeper.zip": _zip({"x.ipynb": json.dumps(
        {"cells": [{"cell_type": "code", "source": ANSWERS[2]}]})})}))
    (tmp_path / "module.wasm.gz").write_bytes(gzip.compress(ANSWERS[0].encode()))     # a binary: not read
    (tmp_path / "broken.zip").write_bytes(b"PK not a zip")
    found = {(leak.file, leak.name) for leak in find_leaks(tmp_path, NAMES)}
    assert found == {("course.zip:pkg/bad.py", "softmax"), ("library.zip.gz (gunzipped):inner/bad.py", "attend_step"),
                     ("library.zip.gz (gunzipped):mod.pyc", "softmax"), ("broken.zip", "?"),
                     ("nested.zip:deeper.zip:x.ipynb", "softmax")}
    assert not find_leaks(tmp_path / "course.zip", frozenset({"other"}))
