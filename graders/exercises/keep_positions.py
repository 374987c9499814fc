"""Hidden tests of ``keep_positions(acc_scores, budget, n_sink, n_recent)`` (chapter 14).

The eviction policy of a cache that keeps ``budget`` of the t positions it has seen.
``acc_scores`` (t,) is the attention each position has accumulated.  When t <= budget every
position is kept.  Otherwise the answer is the first ``n_sink`` positions (attention sinks), the
last ``n_recent`` (the recent window), and among the positions between them the
``budget - n_sink - n_recent`` with the largest scores, a tie going to the earlier position: a
sorted int64 array of min(t, budget) positions.  ``ValueError`` when n_sink + n_recent > budget or
an argument is negative; the input is left as it was.  StreamingLLM is n_recent = budget - n_sink
(the scores do not matter), H2O is n_sink = 0.

The reference below sorts the middle positions by (-score, position) with Python floats; it
shares no code with the course's engine or its solution.
"""
from __future__ import annotations

import functools

import numpy as np

from ..checks import Fail, Raised, describe, unchanged
from ..registry import Call, Exercise, Test, case

FN = "keep_positions"


# ------------------------------------------------------------------------------- reference


def keep(scores, budget, n_sink, n_recent, *, ties="earlier", largest=True, recent_compete=False,
         rule_when_short=False, minus_zero=False) -> list[int]:
    """The positions kept.  The keyword arguments describe common mistakes (for the diagnosis):
    ties to the later position, the smallest scores, the recent positions competing with the
    middle ones, the rule applied even when t <= budget, ``x[-n_recent:]`` when n_recent is 0."""
    scores = [float(s) for s in scores]
    t = len(scores)
    if t <= budget and not rule_when_short:
        return list(range(t))
    sinks = list(range(min(n_sink, t)))
    recent = list(range(t))[-n_recent:] if minus_zero else list(range(max(t - n_recent, 0), t))
    middle = list(range(n_sink, t if recent_compete else t - n_recent))
    sign = -1.0 if largest else 1.0
    order = sorted(middle, key=lambda j: (sign * scores[j], j if ties == "earlier" else -j))
    heavy = order[:max(budget - n_sink - n_recent, 0)]
    return sorted(set(sinks) | set(recent) | set(heavy))


MISTAKES = {
    "it matches breaking ties toward the later position: among equal scores keep the earlier one "
    "(a stable sort by decreasing score, or by (-score, position))": {"ties": "later"},
    "it matches keeping the smallest scores: keep the positions that accumulated the most attention":
        {"largest": False},
    "it matches letting the recent positions compete with the middle ones for the heavy hitters' "
    "places: choose them among the positions between the sinks and the recent window only":
        {"recent_compete": True},
    "it matches applying the eviction rule when t <= budget: then every position is kept":
        {"rule_when_short": True},
    "it matches taking x[-n_recent:] with n_recent = 0, which is the whole of x (-0 is 0): "
    "the last n_recent positions are t - n_recent .. t - 1": {"minus_zero": True},
}


def _diagnose(args, got):
    for text, mistake in MISTAKES.items():
        try:
            if keep(*args, **mistake) == got:
                return text
        except (IndexError, ValueError):
            continue
    return None


# ------------------------------------------------------------------------------ checking


def positions(value, what="the answer") -> list[int]:
    """The returned positions as a list of ints: a 1-D integer numpy array (or a list of ints)."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise Fail(f"{what} is {describe(value)}; expected a 1-D array of positions")
        if value.dtype.kind not in "iu":
            raise Fail(f"{what} has dtype {value.dtype}; expected int64 positions")
        return [int(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in value):
        return [int(v) for v in value]
    raise Fail(f"{what} is {describe(value)}; expected an int64 array of positions")


def _shown(xs) -> str:
    return str(xs) if len(xs) <= 24 else f"{len(xs)} positions"


def _expect(args, value, what="the answer"):
    got, want = positions(value, what), keep(*args)
    if got == want:
        return
    if sorted(got) == want:
        raise Fail(f"{what} holds the right positions but not in increasing order: sort them")
    if len(args[0]) <= args[1]:
        raise Fail(f"{what} should be every position 0 .. t - 1 ({len(want)} of them), got {_shown(got)}: "
                   "when t <= budget every position is kept, whatever the sinks, recent and scores")
    if len(got) != len(want):
        raise Fail(f"{what} keeps {len(got)} positions; with t = {len(args[0])} and budget = {args[1]} it keeps "
                   f"min(t, budget) = {len(want)}" + (f"; {hint}" if (hint := _diagnose(args, got)) else ""))
    hint = _diagnose(args, got)
    raise Fail(f"{what} should be {_shown(want)}, got {_shown(got)}" + (f"; {hint}" if hint else ""))


def _one(args, results):
    _expect(args, results[0].value)


def _many(cases, results):
    """Each call's positions are the reference's (the first that differs is reported)."""
    for number, (args, result) in enumerate(zip(cases, results), start=1):
        _expect(args, result.value, f"case {number} of {len(cases)}")


def _untouched(args, results):
    _expect(args, results[0].value)
    unchanged(args[0], results[0].args_after[0], "acc_scores")


def _int64_array(args, results):
    _expect(args, results[0].value)
    value = results[0].value
    if not isinstance(value, np.ndarray) or value.dtype != np.int64:
        raise Fail(f"the answer is {describe(value)}; return a numpy array of dtype int64 "
                   "(np.array(..., dtype=np.int64))")


def _refuses(good_args, bad, results):
    """The first call is answered right; every other raises ValueError (Python's own)."""
    _expect(good_args, results[0].value, "with valid arguments, the answer")
    for (args, why), result in zip(bad, results[1:]):
        shown = f"keep_positions(<{len(args[0])} scores>, budget={args[1]}, n_sink={args[2]}, n_recent={args[3]})"
        outcome = result.value
        if not isinstance(outcome, Raised):
            raise Fail(f"{shown} should raise ValueError ({why}); it returned {describe(outcome)}")
        if outcome.type.endswith("NotImplementedError"):
            raise Fail(f"{shown} raised NotImplementedError: the starter is still there")
        if not outcome.is_a("ValueError"):
            kind = outcome.type if "." not in outcome.type else \
                f"{outcome.type.rsplit('.', 1)[-1]} (a class of its own, not Python's ValueError)"
            raise Fail(f"{shown} should raise ValueError ({why}); it raised {kind}")


# ------------------------------------------------------------------------------ the inputs


# The statement's worked example: 8 positions, a budget of 5, one sink and two recent.
WORKED_EXAMPLE = (np.array([5.0, 0.5, 3.0, 0.2, 4.0, 1.0, 6.0, 2.0]), 5, 1, 2)


def _scores(rng, t, levels=None):
    """t accumulated scores: positive floats, or drawn from ``levels`` values (ties)."""
    if levels:
        return rng.integers(0, levels, t).astype(np.float64) / levels
    return rng.gamma(0.5, size=t)


def random_case(rng, t=None, levels=None):
    t = int(rng.integers(1, 200)) if t is None else t
    budget = int(rng.integers(0, t + 3))
    n_sink = int(rng.integers(0, budget + 1))
    n_recent = int(rng.integers(0, budget - n_sink + 1))
    return _scores(rng, t, levels), budget, n_sink, n_recent


def one_call(name, points, args, check=_one, capture_args=False) -> Test:
    return case(name, points, [Call(FN, args, capture_args)], check, args)


def many_calls(name, points, cases, **options) -> Test:
    return case(name, points, [Call(FN, args) for args in cases], _many, cases, **options)


def refusals(name, points, good, bad) -> Test:
    calls = [Call(FN, good)] + [Call(FN, args, raises=True) for args, _ in bad]
    return case(name, points, calls, _refuses, good, bad)


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    rng = np.random.default_rng(1401)
    equal = np.ones(12)
    steps = np.array([3.0, 1.0, 2.0, 2.0, 2.0, 1.0, 2.0, 0.5, 9.0, 9.0])
    signed = np.array([0.0, -5.0, 4.0, -1.0, 3.0, -9.0, -0.5, 1e300, -1e300, 2.0, 0.0, 1.0])
    middle = _scores(rng, 30)
    return [
        one_call("the worked example of the statement", 2, WORKED_EXAMPLE),
        many_calls("t <= budget: every position, whatever the sinks, recent and scores", 1,
                   [(_scores(rng, 5), 9, 2, 3), (_scores(rng, 7), 7, 3, 4), (np.zeros(0), 4, 1, 1),
                    (np.array([2.5]), 1, 0, 1), (_scores(rng, 3), 3, 0, 0)]),
        many_calls("ties go to the earlier position", 2,
                   [(equal, 5, 0, 0), (equal, 6, 2, 1), (steps, 5, 1, 1), (steps, 4, 0, 0),
                    (np.array([1.0, 2.0, 2.0, 2.0, 1.0]), 2, 0, 0)]),
        many_calls("StreamingLLM, n_recent = budget - n_sink: the first and the last, whatever the scores", 1,
                   [(middle, 10, 4, 6), (middle[::-1].copy(), 10, 4, 6), (middle, 8, 0, 8), (middle, 5, 5, 0)]),
        many_calls("H2O, n_sink = 0: the heaviest positions and the recent ones", 1,
                   [(middle, 12, 0, 4), (middle, 12, 0, 1), (_scores(rng, 40, levels=4), 10, 0, 3)]),
        many_calls("degenerate budgets: 0, no heavy hitters, no recent, no sinks, t - 1, 1", 2,
                   [(middle, 0, 0, 0), (middle, 6, 2, 4), (middle, 7, 3, 0), (middle, 7, 0, 0),
                    (middle, 29, 5, 5), (middle, 1, 0, 1), (middle, 1, 1, 0), (middle, 1, 0, 0)]),
        one_call("largest means largest: negative scores, huge ones, zeros", 1, (signed, 6, 1, 1)),
        refusals("ValueError when n_sink + n_recent > budget", 1, (middle, 10, 2, 3),
                 [((middle, 4, 3, 2), "n_sink + n_recent = 5 > budget = 4"),
                  ((middle, 0, 0, 1), "n_sink + n_recent = 1 > budget = 0"),
                  ((middle[:3], 4, 3, 2), "n_sink + n_recent > budget, even with t <= budget")]),
        refusals("ValueError when an argument is negative", 1, (middle, 10, 2, 3),
                 [((middle, -1, 0, 0), "a negative budget"), ((middle, 10, -1, 2), "a negative n_sink"),
                  ((middle, 10, 2, -1), "a negative n_recent")]),
        one_call("acc_scores is not modified", 1, (_scores(rng, 50), 12, 2, 3), _untouched, capture_args=True),
        one_call("the answer is an int64 array", 1, (_scores(rng, 25), 9, 1, 2), _int64_array),
        many_calls("twenty random cases (t from 1 to 199)", 3, [random_case(rng) for _ in range(20)]),
        many_calls("ten random cases with many ties (scores of four values)", 2,
                   [random_case(rng, levels=4) for _ in range(10)]),
        many_calls("long caches: t = 8,192 and 4,096", 1,
                   [(_scores(rng, 8192), 256, 4, 64), (_scores(rng, 4096, levels=16), 128, 0, 32)], timeout=10.0),
    ]


EXERCISE = Exercise(name="keep_positions", make_tests=make_tests)
