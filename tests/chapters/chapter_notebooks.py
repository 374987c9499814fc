"""The chapter notebooks as their tests read them: executed, their glued values, their text.

Each chapter is executed once, by the book's build (``make book``, which fails on any cell
error); the tests read the notebooks it leaves in _build/jupyter_execute.  ``execute`` runs a
notebook here only for what the build does not show: a chapter on a machine unlike this one.

Shared by the chapter test files, one per notebook of book/chapters (a module beside them, not a
conftest, so each test file says where its helpers come from).
"""
import ast
import importlib.util
import json
import os
import re
from functools import lru_cache
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "book" / "chapters"
#: Every chapter notebook of the book, by file name without ".ipynb".
CHAPTER_NAMES = sorted(p.stem for p in CHAPTERS.glob("*.ipynb"))

#: A glue role in a chapter's Markdown ({glue:text}`name`, {glue:md}`name:format`): its name.
GLUE_ROLE = re.compile(r"\{glue:(?:text|md)?\}`([A-Za-z0-9_]+)(?::[^`]*)?`")

_spec = importlib.util.spec_from_file_location("sphinx_execution", ROOT / "tools" / "sphinx_execution.py")
sphinx_execution = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sphinx_execution)


def chapter_path(name):
    """book/chapters/NAME.ipynb, NAME without its suffix ("05_batches")."""
    return CHAPTERS / f"{name}.ipynb"


def glue_prefix(name):
    """The prefix every glue key of a chapter starts with: "ch5_" for 05_batches, "appx_" for the
    appendix."""
    number = name.split("_", 1)[0]
    return f"ch{int(number)}_" if number.isdigit() else "appx_"


def execute(path, extra_env=None):
    """Run a notebook as the site build does: without MPLBACKEND in the kernel's environment (with
    Agg, plt.show() would draw nothing), so figures are inline.  ``extra_env`` adds to the kernel's
    environment (a PYTHONPATH with a sitecustomize that pretends to be another machine, say)."""
    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(extra_env or {})
    NotebookClient(nb, timeout=600, kernel_name="python3", iopub_timeout=sphinx_execution.OUTPUT_WAIT,
                   raise_on_iopub_timeout=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
    return nb


#: Where the book's build (``make book``) leaves every notebook it executed, as
#: ``_build/jupyter_execute/book/chapters/NAME.ipynb``, with the values it glued beside it in
#: ``NAME.glue.json`` (myst-nb takes the glue outputs out of the notebook it writes).
BUILD = ROOT / "_build" / "jupyter_execute"


@lru_cache(maxsize=None)
def _executed(path):
    relative = path.resolve().relative_to(ROOT).with_suffix("")
    built = BUILD / relative.with_suffix(".ipynb")
    glue = BUILD / relative.with_suffix(".glue.json")
    if not built.exists():
        pytest.fail(f"the book was not built: {built.relative_to(ROOT)} is missing. The chapter tests read the "
                    "notebooks the book's build executed: run `make book` first (`make test` does).", pytrace=False)
    nb = nbformat.read(built, as_version=4)
    stored = nbformat.read(path, as_version=4)
    if [c.source for c in nb.cells] != [c.source for c in stored.cells]:
        pytest.fail(f"{built.relative_to(ROOT)} was executed from an older {relative}.ipynb: run `make book` again.",
                    pytrace=False)
    return nb, glued_values(json.loads(glue.read_text()) if glue.exists() else {})   # no glue, no file


def executed(path):
    """(the notebook as the book's build executed it, {glue key: value}) of a chapter in
    book/chapters; fails, saying so, when the book was not built or was built from an older
    notebook."""
    return _executed(Path(path))


def glued_values(glue):
    """{key: value} of a build's glue file ({key: the glued output}): the Markdown of prose glued
    with ``glue_prose``, else the text/plain repr, evaluated when it is a Python literal, else the text."""
    values = {}
    for name, out in glue.items():
        data = out["data"]
        if "text/markdown" in data:
            values[name] = data["text/markdown"]
            continue
        try:
            values[name] = ast.literal_eval(data["text/plain"])
        except (ValueError, SyntaxError):
            values[name] = data["text/plain"]
    return values


def glued(nb):
    """{key: value} of every glue in a notebook executed here (``execute``): its Markdown for prose glued with
    ``glue_prose``, else its text/plain repr, evaluated when it is a Python literal, else the text."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if out.get("output_type") != "display_data" or not meta:
                continue
            data = out["data"]
            markdown = data.get("application/papermill.record/text/markdown")
            if markdown is not None:
                assert meta["name"] not in values, f"glue key {meta['name']} glued twice"
                values[meta["name"]] = markdown
                continue
            text = data.get("application/papermill.record/text/plain", data.get("text/plain"))
            assert meta["name"] not in values, f"glue key {meta['name']} glued twice"
            try:
                values[meta["name"]] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                values[meta["name"]] = text
    return values


def markdown(nb):
    """The notebook's Markdown cells, joined."""
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def glue_references(nb):
    """The names of every glue role in the notebook's Markdown."""
    return set(GLUE_ROLE.findall(markdown(nb)))


def assert_glue_references_resolve(nb, values, prefix=""):
    """Every glue role of the notebook's text whose name starts with ``prefix`` names a glued
    value, and there is at least one; returns those names."""
    names = {name for name in glue_references(nb) if name.startswith(prefix)}
    assert names, f"no {prefix}* glue in the text"
    assert names <= set(values), f"referenced but never glued: {sorted(names - set(values))}"
    return names


def errors(nb):
    """The error outputs of an executed notebook."""
    return [out for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def figures(nb):
    """How many PNG figures an executed notebook drew."""
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def number(text):
    """A glued figure as a float: "1,234" -> 1234.0, "56%" -> 56.0."""
    return float(str(text).replace(",", "").rstrip("%"))


def numbers(text):
    """The numbers in a glued display string such as '(0.248, 0.248, 0.503)'."""
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text)]


def answer_cell(nb):
    """The one cell of an exercise notebook tagged "answer"."""
    tagged = [c for c in nb.cells if "answer" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell is tagged 'answer'"
    return tagged[0]


SELF_CHECK = "## Self-check questions"


def self_check_pairs(nb):
    """[(question number, answered right below it)] of a chapter's self-check questions: the
    Markdown from "## Self-check questions" to the next heading of its level, read as a sequence
    of numbered questions ("3. ...") and answer toggles (an ``{admonition} Answer`` with
    ``:class: dropdown``, chapter 1's form).  A question is answered right below when the next
    thing after it is its toggle, before the next question; answers collected after all the
    questions ("{dropdown} Answer 3") count for none."""
    md = markdown(nb)
    if SELF_CHECK not in md:
        return []
    section = md.split(SELF_CHECK, 1)[1]
    end = re.search(r"^## ", section, flags=re.M)
    section = section[:end.start()] if end else section
    events = []
    for m in re.finditer(r"^(\d+)\. |^```+\{admonition\} Answer\s*\n:class: dropdown\s*$", section, flags=re.M):
        events.append(int(m.group(1)) if m.group(1) else "answer")
    pairs = []
    for i, event in enumerate(events):
        if event != "answer":
            pairs.append((event, i + 1 < len(events) and events[i + 1] == "answer"))
    return pairs


def assert_says_how_much_faster(words, ratio, shown_ratio_decimals=None):
    """``words`` compare two times as the course's pages state it, ``ratio`` being the other time
    over this one: "about as fast as" within 5% of 1; else "X times faster than" for a ratio above
    1 and "X times slower than" below, X the ratio (or its inverse) with one decimal below 10 and
    none from 10 up.  When the page rounded the ratio before choosing its words
    (``shown_ratio_decimals``), a ratio on the 5% edge may be read either way."""
    edge = 0.5 * 10 ** -shown_ratio_decimals if shown_ratio_decimals is not None else 0.0
    if words == "about as fast as":
        assert 1 / 1.05 - edge <= ratio <= 1.05 + edge, (words, ratio)
        return
    m = re.fullmatch(r"(\d[\d,]*(?:\.\d)?) times (faster|slower) than", words)
    assert m, f"not a comparison of two times: {words!r}"
    assert (m[2] == "faster") == (ratio > 1), (words, ratio)
    x = ratio if ratio > 1 else 1 / ratio
    assert x >= 1.05 - edge, (words, ratio)
    shown = float(m[1].replace(",", ""))
    decimals = 1 if "." in m[1] else 0
    assert decimals == (1 if shown < 10 else 0), words
    assert abs(shown - x) <= 0.5 * 10 ** -decimals + 2 * edge * x, (words, ratio)


# ---------------------------------------------------------------- the GA-2 chapters (9 and 10)


def text_outputs(nb):
    """Every text a notebook's cells printed or displayed as plain text, joined."""
    return "\n".join("".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
                     for cell in nb.cells for out in cell.get("outputs", []))


def assert_shows_no_answer_and_links_its_exercises(nb, label: str, exercises):
    """The executed chapter prints no answer (the leak scan finds nothing in it), and its text
    links each of its exercises twice: "[NAME exercise](...)" and "[NAME](...)"."""
    from coursetools.answer_leaks import describe, leaks_in_notebook
    leaks = leaks_in_notebook(nb, label)
    assert not leaks, describe(leaks)
    text = markdown(nb)
    for name in exercises:
        assert f"[{name} exercise](../../exercises/{name}.ipynb)" in text
        assert f"[{name}](../../exercises/{name}.ipynb)" in text


def assert_prints_no_machine_answer(nb):
    """The engine's requantizer and tail builder are counterparts of the exercises: no cell prints
    their source (no show_source of them, no inspect), and the Verilog of the requantizer stays off
    the page."""
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "show_source" not in code and "getsource" not in code and "??" not in code
    out = text_outputs(nb)
    assert "module ga2_rq" not in out and "(p + h" not in out


def assert_stored_bare_with_self_checks(path):
    """The chapter as committed: no outputs, at least five self-check questions each answered in a
    toggle right under it, and no "seed" anywhere."""
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    pairs = self_check_pairs(nb)
    assert len(pairs) >= 5 and all(answered for _, answered in pairs), pairs
    assert not re.search(r"\bseeds?\b", "\n".join(c.source for c in nb.cells), flags=re.IGNORECASE)
