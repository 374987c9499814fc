"""What the built pages say and show, read from _build/html (no browser needed):

* no answer: no code block of any page, and no file of the site a learner can download (the
  notebooks under ``_sources``), holds an implementation of a graded function
  (``coursetools.answer_leaks``, driven by the grader's registry);
* no page speaks of "the seed": readers never saw the course's source documents;
* the visible code of every chapter teaches: the share of its lines that are glue or plot
  plumbing stays small, cells that only glue are hidden, and no chapter redefines a helper that
  ``coursebook`` provides (or one another chapter defines);
* no page shows what a cell wrote to stderr, or a warning (text meant for the build's log, with
  the build's paths in it).
"""
from __future__ import annotations

import ast
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

import coursebook
from coursetools.answer_leaks import describe, find_leaks

from test_every_page import ROOT, site_pages, toc_docnames

CHAPTERS = [name for name in toc_docnames() if name.startswith("book/chapters/")]
# Calls whose only job is to hand figures to the text or to configure the plotting.
PLUMBING_CALLS = {"glue", "glue_all", "glue_prose", "rcdefaults", "set_printoptions", "tight_layout", "use",
                  "setup", "update"}
PLUMBING_NAMES = re.compile(r"^\s*(from myst_nb import|import inspect\b|%matplotlib|plt\.rcParams)")
MAX_PLUMBING_SHARE = 0.05


class _Page(HTMLParser):
    """The visible text of a page, and the text of each code cell's input."""

    SKIP = {"script", "style", "noscript"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.inputs: list[str] = []
        self._skip = 0
        self._stack: list[tuple[str, bool]] = []     # (tag, opens a cell input)
        self._in_input = 0
        self._pre: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        opens_input = tag == "div" and "cell_input" in classes
        if tag not in ("br", "img", "meta", "link", "input", "hr"):
            self._stack.append((tag, opens_input))
        self._in_input += opens_input
        if tag in self.SKIP:
            self._skip += 1
        if tag == "pre" and self._in_input:
            self._pre = []

    def handle_endtag(self, tag):
        while self._stack:
            open_tag, opened_input = self._stack.pop()
            self._in_input -= opened_input
            if open_tag == tag:
                break
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        if tag == "pre" and self._pre is not None:
            self.inputs.append("".join(self._pre))
            self._pre = None

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)
        if self._pre is not None:
            self._pre.append(data)


def read_page(site: Path, page: str) -> _Page:
    parser = _Page()
    parser.feed((site / page).read_text(encoding="utf-8"))
    return parser


class _Outputs(HTMLParser):
    """The output blocks of a page's code cells: (the block's classes, its text).  myst-nb draws
    each output as a div of class "output" and its kind: "stream", "stderr", "text_plain", ..."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[list[str], list[str]]] = []
        self._depths: list[int] = []     # the div depth at which each open block started
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        if tag != "div":
            return
        self._depth += 1
        classes = (dict(attrs).get("class") or "").split()
        if "output" in classes and not self._depths:
            self.blocks.append((classes, []))
            self._depths.append(self._depth)

    def handle_endtag(self, tag):
        if tag != "div":
            return
        if self._depths and self._depths[-1] == self._depth:
            self._depths.pop()
        self._depth -= 1

    def handle_data(self, data):
        if self._depths:
            self.blocks[-1][1].append(data)


def noisy_outputs(html: str) -> list[str]:
    """The output blocks of a page that are a stderr stream or say "Warning"."""
    parser = _Outputs()
    parser.feed(html)
    return [" ".join(classes) + ": " + "".join(text).strip()[:200] for classes, text in parser.blocks
            if "stderr" in classes or "Warning" in "".join(text)]


def test_noisy_outputs_are_found():
    stderr = ('<div class="cell_output docutils container"><div class="output stderr highlight-myst-ansi notranslate">'
              '<div class="highlight"><pre><span></span>/tmp/x/calc.py:345: UserWarning: The figure layout has changed'
              '</pre></div></div><img src="a.png" /></div>')
    printed = ('<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi notranslate">'
               '<div class="highlight"><pre>batch 4</pre></div></div></div>')
    assert noisy_outputs(stderr) == ["output stderr highlight-myst-ansi notranslate: "
                                     "/tmp/x/calc.py:345: UserWarning: The figure layout has changed"]
    assert noisy_outputs(printed) == []
    assert noisy_outputs(printed.replace("batch 4", "DeprecationWarning: soon")) != []


@pytest.mark.parametrize("page", site_pages())
def test_no_page_shows_stderr_or_a_warning(site, page):
    noisy = noisy_outputs((site / page).read_text(encoding="utf-8"))
    assert not noisy, f"{page} shows output meant for the build's log: {noisy}"


def test_no_page_and_no_download_gives_an_answer(site):
    leaks = find_leaks(site)
    assert not leaks, "an implementation of a graded function is on the site:\n" + describe(leaks)
    assert any(site.glob("_sources/**/*.ipynb")), "the downloadable notebooks were scanned too"


@pytest.mark.parametrize("page", site_pages())
def test_no_page_says_seed(site, page):
    text = " ".join(read_page(site, page).text)
    found = re.findall(r"[^.]{0,40}\bseeds?\b[^.]{0,40}", text, flags=re.IGNORECASE)
    assert not found, f"{page} speaks of a seed: {found[:3]}"


def test_no_downloadable_notebook_says_seed(site):
    for path in site.glob("_sources/**/*.ipynb"):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            source = "".join(cell["source"])
            assert not re.search(r"\bseeds?\b", source, flags=re.IGNORECASE), (path.name, source[:80])


def plumbing_lines(code: str) -> int:
    """Lines of ``code`` that are glue or plot plumbing (a call of PLUMBING_CALLS, counted over
    all its lines, or a line matching PLUMBING_NAMES)."""
    lines = set()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name in PLUMBING_CALLS and (name != "update" or "rcParams" in ast.unparse(node.func)) \
                        and (name != "use" or "matplotlib" in ast.unparse(node.func)):
                    lines |= set(range(node.lineno, node.end_lineno + 1))
    source = code.splitlines()
    lines |= {i + 1 for i, line in enumerate(source) if PLUMBING_NAMES.match(line)}
    return sum(1 for i in lines if 0 < i <= len(source) and source[i - 1].strip())


def code_lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#"))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_visible_chapter_code_is_mostly_teaching(site, chapter):
    inputs = read_page(site, f"{chapter}.html").inputs
    assert len(inputs) >= 8, f"{chapter}: its code cells should be on the page"
    total = sum(code_lines(code) for code in inputs)
    plumbing = sum(plumbing_lines(code) for code in inputs)
    share = plumbing / total
    print(f"{chapter}: {plumbing} of {total} visible code lines are glue or plot plumbing ({share:.1%})")
    assert share <= MAX_PLUMBING_SHARE, (
        f"{chapter}: {plumbing} of {total} visible code lines ({share:.0%}) are glue or plot plumbing: "
        "move them to a cell tagged remove-cell, or into coursebook")
    assert not any(code.strip() and plumbing_lines(code) == code_lines(code) for code in inputs), (
        f"{chapter}: a visible cell does nothing but glue or set up plots: tag it remove-cell")


def test_plumbing_is_counted():
    assert plumbing_lines('glue_all(a=1,\n         b=2)\nx = 1\n') == 2
    assert plumbing_lines('plt.rcParams.update({"a": 1})\nfig.tight_layout()\nfrom myst_nb import glue\n') == 3
    assert plumbing_lines('d = {}\nd.update(x=1)\nax.plot(x)\n') == 0


def chapter_functions() -> dict[str, list[str]]:
    """{function name: [chapters defining it]} over the code cells of every chapter notebook."""
    defined: dict[str, list[str]] = {}
    for name in CHAPTERS:
        nb = json.loads((ROOT / f"{name}.ipynb").read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            # a cell may run a line magic (%run -m kvcache ...): read it as the kernel runs it
            for node in ast.walk(ast.parse(TransformerManager().transform_cell("".join(cell["source"])))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defined.setdefault(node.name, []).append(name)
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            defined.setdefault(target.id, []).append(name)
    return defined


def test_no_helper_is_redefined_in_a_chapter():
    defined = chapter_functions()
    provided = set(coursebook.__all__) | {"show", "vec", "rel_err", "glue", "machine", "shape_of_growth"}
    redefined = {name: where for name, where in defined.items() if name in provided}
    assert not redefined, f"chapters define helpers coursebook provides: {redefined}"
    repeated = {name: where for name, where in defined.items() if len(where) > 1}
    assert not repeated, f"the same function is defined in several chapters (move it to coursebook): {repeated}"
