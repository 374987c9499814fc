"""The public checks as an exercise page of the course's site runs them, in the reader's browser.

The page runs Python in a Web Worker (``book/_static/runtime/``), one interpreter kept from run
to run, and for each press of Run calls::

    run(NAME, installs)

with the files of the run in the current folder: ``answer.py`` (the editor's text: the
exercise's answer cell, as the reader wrote it), ``checks.py`` (the exercise notebook's own
public-checks cell, ``run_checks(NAME, ...)``) and, for an exercise whose notebook plugs the
reader's earlier answers into GA-2 (``ga2.install_from("requant.ipynb")``), those notebooks,
made by the page from what the reader wrote on their pages.

A run is the notebook's, in a fresh namespace: the earlier answers installed (quietly: the
notebook's line about them is not the checks' output), the answer cell, then the public-checks
cell, whose report is printed by ``run_checks`` itself, unchanged.  The interpreter is the same
from run to run, so a run first puts back what an earlier one may have changed: the course's
modules are imported afresh (an answer that wrote into the checks' stored data, or a part left
installed, never reaches the next run).  An error in the answer is shown as Python shows it,
with the lines of ``answer.py`` called "your code"; a failed check is the report alone (the
notebook adds the traceback of ``PublicCheckFailed``, which says nothing more).
"""
from __future__ import annotations

import contextlib
import io
import linecache
import sys
import traceback
from pathlib import Path

__all__ = ["run", "YOUR_CODE"]

#: The name the reader's code goes by in tracebacks (a notebook says "Cell In[3]").
YOUR_CODE = "your code"
#: The course's packages a run imports afresh.
COURSE_PACKAGES = ("public_checks", "ga2", "answers")


def _forget_course_modules() -> None:
    """Drop the course's modules (but this one) so that the next import reads them anew."""
    for name in list(sys.modules):
        if name.split(".")[0] in COURSE_PACKAGES and name != __name__:
            del sys.modules[name]


def _show_error(err: BaseException, filename: str) -> None:
    """The error as Python prints it, with only the frames of ``filename`` (the reader's code or
    the checks cell), never the page's own."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == filename]
    if frames:
        print("Traceback (most recent call last):")
        print("".join(traceback.format_list(frames)), end="")
    print("".join(traceback.format_exception_only(type(err), err)), end="")


def _install(notebooks) -> None:
    """Put the reader's earlier answers into GA-2, as the notebook's ``ga2.install_from`` does."""
    if not notebooks:
        return
    import ga2
    with contextlib.redirect_stdout(io.StringIO()):
        for notebook in notebooks:
            ga2.install_from(notebook)


def _source(path: str, name: str) -> str:
    text = Path(path).read_text(encoding="utf-8")
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    return text


def run(name: str, installs=()) -> None:
    """One press of Run on exercise ``name``'s page; prints what the notebook's cells print."""
    _forget_course_modules()
    answer = _source("answer.py", YOUR_CODE)
    checks = _source("checks.py", "public checks")
    namespace = {"__name__": "__main__"}
    try:
        _install(installs)
    except Exception as err:  # noqa: BLE001 - an earlier answer that does not even load
        print(f"Your earlier answer could not be put into GA-2: {type(err).__name__}: {err}")
        return
    try:
        exec(compile(answer, YOUR_CODE, "exec"), namespace)  # noqa: S102 - the reader's own code
    except BaseException as err:  # noqa: BLE001 - the reader's code, whatever it raises
        _show_error(err, YOUR_CODE)
        return
    try:
        exec(compile(checks, "public checks", "exec"), namespace)  # noqa: S102 - the notebook's cell
    except BaseException as err:  # noqa: BLE001
        if type(err).__name__ != "PublicCheckFailed":
            _show_error(err, YOUR_CODE if any(f.filename == YOUR_CODE for f in
                                              traceback.extract_tb(err.__traceback__)) else "public checks")
