"""coursebook: the chapters' helpers (tables, vectors, glue, the source of engine functions, the
words for measured figures)."""
from __future__ import annotations

import html
import re
import subprocess
import sys
import types
from html.parser import HTMLParser

import numpy as np
import pytest

import coursebook
from coursebook import (against_prediction, and_join, glue_all, glue_prose, growth_word, matrix, rel_err,
                        relation_word, show_source, table, times_word, vec)
from coursebook.display import GradedSourceError
from coursebook.style import FIGURE_STYLE


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.classes, self._row, self._cell = [], [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
            self.classes.append(dict(attrs).get("class", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr":
            self.rows.append(self._row)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def cells(html):
    parser = _Cells()
    parser.feed(html)
    return parser


def test_table_renders_html_markdown_and_text():
    t = table([(1, "a<b", 2.5), (1000, "c|d", 3.25)], ["n", "name", "x"], {"n": ",", "x": ".2f"})
    parsed = cells(t._repr_html_())
    assert parsed.rows == [["n", "name", "x"], ["1", "a<b", "2.50"], ["1,000", "c|d", "3.25"]]
    assert parsed.classes[:3] == ["num", "", "num"]                 # numbers right-aligned
    md = t._repr_markdown_().splitlines()
    assert md[0] == "| n | name | x |" and md[1] == "|---:|:---|---:|" and md[3] == "| 1,000 | c\\|d | 3.25 |"
    text = str(t).splitlines()
    assert text[0].split() == ["n", "name", "x"] and text[2].startswith("    1  a<b")
    assert repr(t) == str(t)


def test_table_formats_and_errors():
    t = table([(0.5,)], ["s"], [lambda v: f"{v * 1e3:.0f} ms"], caption="times")
    assert cells(t._repr_html_()).rows[-1] == ["500 ms"] and "<caption>times</caption>" in t._repr_html_()
    with pytest.raises(ValueError, match="3 values under 2 columns"):
        table([(1, 2, 3)], ["a", "b"])
    with pytest.raises(ValueError, match="do not exist"):
        table([(1,)], ["a"], {"b": ","})
    with pytest.raises(ValueError, match="2 formats for 1 columns"):
        table([(1,)], ["a"], [None, None])
    assert cells(table([], ["a"])._repr_html_()).rows == [["a"]]


def test_matrix_and_vec():
    M = np.array([[1.0, 0.0], [0.25, 0.75]])
    t = matrix(M, 2, "query", "key", masked=~np.tril(np.ones((2, 2), bool)))
    assert cells(t._repr_html_()).rows == [["", "key 0", "key 1"], ["query 0", "1.00", "masked"],
                                           ["query 1", "0.25", "0.75"]]
    with pytest.raises(ValueError, match="2-D"):
        matrix(np.zeros(3))
    assert vec([0.75172, 1.50351]) == "(0.7517, 1.5035)"
    assert vec(np.array([1.0, -0.5]), 3, "[]") == "[1.000, -0.500]"
    assert vec([2.0], 0) == "(2)"


def test_show_source_prints_the_engine_but_never_an_answer(capsys):
    from lessons.attention import attend, softmax, scores
    from lessons.memory import kv_cache_bytes
    from lessons.transformer import softmax as tiny_softmax
    show_source(scores)
    assert capsys.readouterr().out.startswith("def scores(q, K):")
    for graded in (softmax, tiny_softmax, kv_cache_bytes):
        with pytest.raises(GradedSourceError, match="graded by an exercise"):
            show_source(graded)
    show_source(attend)


def _walk(steps, limit=3):
    """A function for show_source to cut: a docstring, a loop, a return."""
    total = 0
    for step in steps:
        if step > limit:
            break
        total += step
    return total


class _Holder:
    def method(self, x):
        return x + 1


def test_source_keeps_the_lines_the_text_discusses():
    from coursebook.display import source
    whole = source(_walk)
    first = _walk.__code__.co_firstlineno
    assert str(whole).splitlines()[0] == "def _walk(steps, limit=3):"
    assert (whole.first, whole.last) == (first, first + 7) and len(str(whole).splitlines()) == 8
    loop = source(_walk, "for step", "total += step")
    assert str(loop).splitlines() == ["def _walk(steps, limit=3):", "    ...", "    for step in steps:",
                                      "        if step > limit:", "            break",
                                      "        total += step"]
    assert (loop.first, loop.last) == (first, first + 6)
    assert str(source(_walk, 8)).splitlines() == ["def _walk(steps, limit=3):", "    ...", "    return total"]
    # "total" first appears on line 3; the end is searched from the start on
    assert str(source(_walk, "total = 0", "total")).splitlines()[-1] == "    total = 0"
    assert str(source(_Holder.method)).splitlines() == ["def method(self, x):", "    return x + 1"]
    for bad, message in (({"start": "no such text"}, "no line of _walk contains it"),
                         ({"start": 0}, "_walk has lines 1 to 8"), ({"end": 9}, "_walk has lines 1 to 8"),
                         ({"start": "return total", "end": 2}, "before start")):
        with pytest.raises(ValueError, match=message):
            source(_walk, **bad)
    with pytest.raises(TypeError, match="start must be a line number or a text"):
        source(_walk, start=2.0)


def test_source_html_is_highlighted_and_wraps_under_its_indentation():
    from coursebook.display import source
    page = source(_walk, "for step", "break")._repr_html_()
    lines = re.findall(r'<span class="cs-line" style="display: block; padding-left: (\d+)ch; '
                       r'text-indent: -(\d+)ch">(.*?)</span>(?=<span class="cs-line"|</pre>)', page)
    assert [int(pad) for pad, _, _ in lines] == [4, 8, 8, 12, 16]       # indentation + 4
    assert all(pad == indent for pad, indent, _ in lines)
    assert '<span class="k">for</span>' in page and '<span class="k">break</span>' in page
    # the part's lines are counted from the function's first, as start and end count them, not the file's
    assert "white-space: pre-wrap" in page and "test_chapter_helpers._walk, lines 1-6 of its 8</div>" in page
    assert ">test_chapter_helpers._walk</div>" in source(_walk)._repr_html_()          # the whole function
    text = re.sub(r"<[^>]+>", "", "\n".join(line for _, _, line in lines))
    assert html.unescape(text) == str(source(_walk, "for step", "break"))


def test_show_source_displays_each_call_in_a_notebook():
    """In a kernel every call is displayed (a cell may show several functions), as HTML."""
    from IPython.core.interactiveshell import InteractiveShell
    shown = []
    shell = InteractiveShell.instance()
    try:
        shell.display_pub.publish = lambda data, metadata=None, **kw: shown.append(data)
        show_source(_walk)
        show_source(_walk, "return total")
    finally:
        InteractiveShell.clear_instance()
    assert len(shown) == 2 and all("text/html" in d and "coursebook-source" in d["text/html"] for d in shown)
    assert shown[1]["text/plain"] == "def _walk(steps, limit=3):\n    ...\n    return total"


def test_words_for_measured_figures():
    assert times_word(51.2) == "51 times faster than"
    assert times_word(3.24) == "3.2 times faster than"
    assert times_word(1.02) == "about as fast as"
    assert times_word(0.4) == "2.5 times slower than"            # a loaded machine can invert a ratio
    assert times_word(1234.4) == "1,234 times faster than"
    with pytest.raises(ValueError):
        times_word(0.0)
    assert relation_word(600, 50) == "above" and relation_word(50, 600) == "below"
    assert relation_word(100, 98) == "equal to"
    assert [growth_word(x) for x in (1.0, 1.5, 2.0, 2.5)] == [
        "close to linear", "between linear and quadratic", "close to quadratic", "faster than quadratic"]
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    assert rel_err(a, a) == 0.0 and rel_err(a * 1.01, a) == pytest.approx(0.01)


def test_lists_for_a_sentence():
    assert and_join([5]) == "5" and and_join([5, 9]) == "5 and 9"
    assert and_join([1, 2, 3, 5]) == "1, 2, 3 and 5"
    assert and_join(x for x in ("316", "11", "788")) == "316, 11 and 788"
    with pytest.raises(ValueError):
        and_join([])


@pytest.mark.parametrize("measured,words", [
    ((1.6, 515.0), "The measurement is below the prediction at both 16 and 2,048 tokens"),
    ((20.0, 2000.0), "The measurement is above the prediction at both 16 and 2,048 tokens"),
    ((13.0, 1300.0), "The measurement is close to the prediction at both 16 and 2,048 tokens"),
    ((1.6, 2000.0), "The measurement is below the prediction at 16 tokens and above it at 2,048"),
    ((20.0, 515.0), "The measurement is above the prediction at 16 tokens and below it at 2,048"),
    ((13.0, 515.0), "The measurement is close to the prediction at 16 tokens and below it at 2,048"),
    ((1.6, 1300.0), "The measurement is below the prediction at 16 tokens and close to it at 2,048"),
])
def test_a_measurement_against_its_prediction_in_every_case(measured, words):
    assert against_prediction(measured, (13.6, 1234.0), (16, 2048)) == words


def test_a_measurement_against_its_prediction_at_one_or_many_places():
    assert against_prediction([1.0], [2.0], [64]) == "The measurement is below the prediction at 64 tokens"
    assert against_prediction(np.array([1.0, 3.0, 9.0]), [1.0, 4.0, 8.0], np.array([16, 512, 4096]),
                              unit="positions", tolerance=0.05) == (
        "The measurement is close to the prediction at 16 positions, below it at 512 and above it at 4,096")
    assert against_prediction([5.0, 5.0, 5.0], [1.0, 1.0, 1.0], [1, 2, 3]) == (
        "The measurement is above the prediction at each of 1, 2 and 3 tokens")
    assert against_prediction([1.1], [1.0], ["L = 3"], unit="", subject="The chip") == \
        "The chip is close to the prediction at L = 3"
    with pytest.raises(ValueError, match="one prediction and one place"):
        against_prediction([1.0, 2.0], [1.0], [16, 32])
    with pytest.raises(ValueError):
        against_prediction([], [], [])


def test_glue_helpers_check_their_names():
    with pytest.raises(ValueError):
        glue_all({"not a name": 1})
    with pytest.raises(ValueError):
        glue_prose(ch_x="")


def test_setup_applies_one_style():
    import matplotlib.pyplot as plt
    plt.rcParams["font.size"] = 23
    coursebook.setup()
    for key, value in FIGURE_STYLE.items():
        got = plt.rcParams[key]
        assert (list(got) if isinstance(got, (list, tuple)) else got) == (list(value) if isinstance(value, tuple) else value)
    assert np.get_printoptions()["precision"] == 4


def test_importing_coursebook_imports_no_numpy():
    """A chapter limits numpy's BLAS threads after importing coursebook: it must not load numpy."""
    code = "import sys, coursebook, kvcache.blas, lessons.machine_facts\nprint('numpy' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_show_source_refuses_the_engines_implementation_of_an_answer(capsys):
    """The machine's requantizer is the requant exercise, under any name it is reached by; a module
    counterpart (the circuit, for the requantizer) is refused whole; the rest of ga2 is shown."""
    import ga2
    from ga2.rtl import circuit
    from ga2.quant import mantissa_shift, requant
    alias = ga2.machine.requant
    for answer in (requant, alias, ga2.attn.attention_tail):
        with pytest.raises(GradedSourceError):
            show_source(answer)
    renamed = types.FunctionType(requant.__code__, requant.__globals__, "rq_renamed")
    renamed.__qualname__ = "requant"
    with pytest.raises(GradedSourceError, match="ga2.quant:requant implements the answer of the exercise requant"):
        show_source(renamed)
    with pytest.raises(GradedSourceError, match="ga2.rtl implements the answer of the exercise requant"):
        show_source(circuit.run)
    show_source(mantissa_shift)
    assert capsys.readouterr().out.startswith("def mantissa_shift(x: float)")


def test_fields_table_shows_dataclasses_as_tables_not_reprs():
    import dataclasses

    from coursebook import fields_table

    @dataclasses.dataclass(frozen=True)
    class Shape:
        name: str
        layers: int
        params: int
        hidden: int = dataclasses.field(default=0, repr=False)

    shapes = {"small": Shape("small model", 4, 1_000_000), "large": Shape("large model", 32, 7_000_000_000)}
    rows = cells(fields_table(shapes, labels={"layers": "layers L"})._repr_html_()).rows
    assert rows == [["key", "name", "layers L", "params"], ["small", "small model", "4", "1,000,000"],
                    ["large", "large model", "32", "7,000,000,000"]]
    assert cells(fields_table(list(shapes.values()))._repr_html_()).rows[0] == ["name", "layers", "params"]
    one = cells(fields_table(shapes["large"], formats={"params": ".1e"})._repr_html_()).rows
    assert one == [["field", "value"], ["name", "large model"], ["layers", "32"], ["params", "7.0e+09"]]
    assert "Shape(" not in str(fields_table(shapes)) and "Shape(" not in fields_table(shapes)._repr_markdown_()
    with pytest.raises(TypeError, match="dataclass instances, got dict"):
        fields_table({"a": {"x": 1}})
    with pytest.raises(TypeError, match="dataclass instances, got type"):
        fields_table(Shape)
    with pytest.raises(ValueError, match="fields that do not exist: \\['size'\\]"):
        fields_table(shapes, formats={"size": ","})
    with pytest.raises(ValueError, match="at least one"):
        fields_table([])


def test_text_blocks_wrap_replies_under_their_labels():
    """A model's replies: each label over its text; the plain text wrapped at 78 characters and
    indented, the text's own line breaks kept; the HTML escaped and set to wrap, never to scroll."""
    from coursebook import text_blocks

    long = "The KV cache keeps the keys and values of every earlier token, " * 4
    blocks = text_blocks([("0. What is a KV cache?", long.strip()), ("1. A haiku <sea>", "one\ntwo & three"),
                          ("2. Nothing", "")])
    lines = str(blocks).splitlines()
    assert lines[0] == "0. What is a KV cache?" and all(len(line) <= 78 for line in lines)
    first = lines[1:lines.index("1. A haiku <sea>")]
    assert len(first) > 2 and all(line.startswith("  ") for line in first)
    assert " ".join(line.strip() for line in first) == " ".join(long.split())
    assert lines[lines.index("1. A haiku <sea>") + 1:] == ["  one", "  two & three", "2. Nothing", "  (empty)"]
    page = blocks._repr_html_()
    assert "1. A haiku &lt;sea&gt;" in page and "two &amp; three" in page
    assert page.count("<blockquote") == 3 and "white-space: pre-wrap" in page
    assert str(text_blocks({"label": "text"})) == "label\n  text"
    with pytest.raises(ValueError, match="text block 1 is not a \\(label, text\\) pair"):
        text_blocks([("a", "b"), "c"])
    with pytest.raises(ValueError, match="width"):
        text_blocks([("a", "b")], width=5)
