"""Helpers for exercises whose answer is one number computed from a few arguments.

A test is a list of argument tuples; the check compares each returned number with the grader's
reference, exactly for integers (``check_exact_int``) or within a relative tolerance for reals
(``check_real``), and names the case by its position, never by its arguments or its answer.
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import Fail, check_exact_int, check_real, describe
from ..registry import Call, Test, case


def _compare(value, expected, what, exact, rtol, hints) -> None:
    if exact:
        check_exact_int(value, expected, what, hints)
    else:
        check_real(value, expected, what, rtol=rtol, hints=hints)


def _check_values(cases, expected, reference, anchor, exact, rtol, hints, results) -> None:
    """Each case's number is the reference's; then the anchor's, if any."""
    for k, exp in enumerate(expected):
        _compare(results[k].value, exp, f"case {k + 1} of {len(cases)}: the result" if len(cases) > 1
                 else "the result", exact, rtol, hints)
    if anchor:
        try:
            _compare(results[len(cases)].value, reference(*anchor), "on an ordinary case, the result", exact, rtol,
                     hints)
        except Fail as fail:
            raise Fail(f"{fail} (this test counts only together with the right answer on an ordinary "
                       "case)") from None


def values_test(fn: str, name: str, points: float, cases, reference, *, exact: bool, hints=None,
                rtol: float = 1e-9, anchor=None) -> Test:
    """The results of ``cases`` against the reference.  ``anchor``: an ordinary case the test
    also calls, for a test whose own answer a constant gives (0 for an empty cache): it counts
    only together with the right answer there, so that ``return 0`` earns nothing."""
    calls = [Call(fn, tuple(args)) for args in cases] + ([Call(fn, tuple(anchor))] if anchor else [])
    return case(name, points, calls, _check_values, cases, [reference(*args) for args in cases], reference, anchor,
                exact, rtol, hints, step="case")


def _check_type(kind: str, expected, results) -> None:
    """The result is a Python ``int`` (kind "int") or a real number (kind "float"), and the right one."""
    value = results[0].value
    if kind == "int":
        if type(value) is not int:
            extra = " (use int(...) or plain Python arithmetic)" if isinstance(value, (np.integer, float, np.floating)) else ""
            raise Fail(f"the result is {describe(value)}; expected a Python int{extra}")
    else:
        if isinstance(value, bool) or not isinstance(value, (float, np.floating)):
            if isinstance(value, int):
                raise Fail("the result is a Python int; expected a float (seconds or ops per byte "
                           "are not whole numbers in general: use / rather than //)")
            raise Fail(f"the result is {describe(value)}; expected a float")
        if not math.isfinite(float(value)):
            raise Fail("the result is not finite")
    if kind == "int":
        check_exact_int(value, expected, "the result")
    else:
        check_real(value, expected, "the result")


def type_test(fn: str, name: str, points: float, args, kind: str, reference) -> Test:
    """The result is a Python ``int`` (kind "int") or a real number (kind "float": a Python float
    or a numpy floating scalar, not an array), and the right one: the type of a wrong answer
    (a constant 0.0) earns nothing."""
    return case(name, points, [Call(fn, tuple(args))], _check_type, kind, reference(*args))
