"""Public checks: the few cases a learner runs inside an exercise notebook.

Each exercise NAME has a module ``public_checks/NAME.py`` that defines ``CHECKS``,
a list of ``(description, check)`` pairs; ``check(fn)`` calls the learner's function
and raises ``AssertionError`` with a readable message when the answer is wrong.  An
exercise that grades several functions passes them all, in the exercise's order:
``run_checks("mutants", predict_catches, check_builder)``, and each check receives them all.

``run_checks(NAME, fn)`` runs them, prints one line per check and returns a ``CheckReport``
(true when every check passed; it shows nothing more in a notebook, the printed report is the answer).  Starter code that
still raises ``NotImplementedError`` is reported as "not implemented yet" and the cell
finishes normally, so an untouched exercise notebook runs to the end.  A wrong answer
raises ``PublicCheckFailed`` after the report, so a solution notebook that regressed
fails under nbval.

These checks are deliberately few.  The grade comes from hidden tests; how a learner gets
them run depends on the copy of the course (``public_checks.handing_in`` words it).
"""
from __future__ import annotations

import importlib
import textwrap
import traceback
from dataclasses import dataclass
from typing import Callable

from . import handing_in

__all__ = ["run_checks", "load_checks", "evaluate", "where", "CheckOutcome", "CheckReport", "PublicCheckFailed",
           "HIDDEN_NOTE"]

HIDDEN_NOTE = "public checks passed; hidden tests run at grading"
#: The report's lines are wrapped to this many characters: the width of an output on the course's
#: pages (an exercise page shows the report of its starter code) and of a notebook's cell.
REPORT_WIDTH = 88


class PublicCheckFailed(AssertionError):
    """At least one public check failed (the report above says which).

    IPython shows it as its one line, not as a traceback of this package: the report above it is
    what the learner reads (``_render_traceback_`` is IPython's hook for that)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class CheckOutcome:
    description: str
    status: str  # "passed", "failed" or "not implemented"
    message: str = ""


@dataclass(frozen=True)
class CheckReport:
    """What ``run_checks`` found: true when every public check passed."""
    name: str
    outcomes: tuple

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(o.status == "passed" for o in self.outcomes)

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        # The report was printed line by line already; a trailing "True"/"False" under it
        # would only confuse a learner.
        pass


def load_checks(name: str) -> list[tuple[str, Callable]]:
    """The ``CHECKS`` list of exercise ``name``."""
    try:
        module = importlib.import_module(f"public_checks.{name}")
    except ModuleNotFoundError as err:
        raise KeyError(f"no public checks for an exercise named {name!r}") from err
    return list(module.CHECKS)


def where(err: BaseException) -> str:
    """Where ``err`` was raised: "line N of FUNCTION", N counted from the function's own first line
    (1 is its ``def``), so the same on the site's exercise page (the answer cells one after the other)
    and in the notebook (each cell numbered from 1)."""
    frame, lineno = None, 0
    for frame, lineno in traceback.walk_tb(err.__traceback__):
        pass
    if frame is None:
        return "where it was raised is not known"
    code = frame.f_code
    if code.co_name == "<module>":
        return f"line {lineno} of the cell"
    return f"line {lineno - code.co_firstlineno + 1} of {code.co_name}"


def evaluate(name: str, *fns: Callable) -> list[CheckOutcome]:
    """Run every public check of ``name`` against the learner's ``fns``; never raises for a wrong
    answer."""
    outcomes = []
    for description, check in load_checks(name):
        try:
            check(*fns)
        except NotImplementedError:
            outcomes.append(CheckOutcome(description, "not implemented"))
        except AssertionError as err:
            outcomes.append(CheckOutcome(description, "failed", str(err) or "wrong answer"))
        except Exception as err:  # the learner's code crashed: show where, not our internals
            outcomes.append(CheckOutcome(description, "failed", f"{type(err).__name__}: {err} ({where(err)})"))
        else:
            outcomes.append(CheckOutcome(description, "passed"))
    return outcomes


def _say(text: str, indent: str = "") -> None:
    """Print ``text`` with each of its lines wrapped to REPORT_WIDTH characters (the continuation
    lines start with ``indent``); a line that fits, or a word longer than the width, is left whole."""
    for line in text.splitlines() or [""]:
        if len(line) <= REPORT_WIDTH:
            print(line)
        else:
            print(textwrap.fill(line, REPORT_WIDTH, subsequent_indent=indent, break_long_words=False,
                                break_on_hyphens=False, replace_whitespace=False))


def run_checks(name: str, *fns: Callable) -> CheckReport:
    """Print a report of the public checks of ``name`` for the learner's ``fns``.

    The report is true when all pass and false when a function is not implemented yet;
    ``PublicCheckFailed`` is raised when a check fails.
    """
    outcomes = evaluate(name, *fns)
    report = CheckReport(name, tuple(outcomes))
    if outcomes and all(o.status == "not implemented" for o in outcomes):
        _say(f"{name}: not implemented yet.\nWrite your answer in the cell above, run it, then run this cell again.")
        return report
    for o in outcomes:
        mark = {"passed": "ok  ", "failed": "FAIL", "not implemented": "todo"}[o.status]
        line = f"[{mark}] {o.description}"
        if o.message:
            line += f": {o.message}"
        _say(line, indent=" " * len("[FAIL] "))
    passed = sum(o.status == "passed" for o in outcomes)
    _say(f"{passed} of {len(outcomes)} public checks passed.")
    if passed == len(outcomes):
        _say(handing_in.after_checks(name), indent="  ")
        return report
    if any(o.status == "failed" for o in outcomes):
        raise PublicCheckFailed(f"{name}: {len(outcomes) - passed} public check(s) did not pass; see the report above")
    _say(f"{name}: part of the answer is not implemented yet.")
    return report
