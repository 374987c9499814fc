"""graders.answer_leaks: a definition of a graded function anywhere a learner reads it must be a
starter.  The graded names come from the grader's registry, so a new exercise is covered the day
it is registered; the built site and the release are scanned by tests/site and
tests/graders/test_grader_release.py with the same function."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from graders import registry
from graders.answer_leaks import (find_leaks, graded_functions, leaks_in_html, leaks_in_notebook, leaks_in_source,
                                  leaks_in_text)

ROOT = Path(__file__).resolve().parents[1]
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
    assert {leak.name for leak in find_leaks(ROOT / "kvcache")} == graded_functions() - classes
