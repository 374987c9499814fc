"""Public checks for the exercise ``keep_positions(acc_scores, budget, n_sink, n_recent)``
(chapter 14).

A few small cases; the expected positions, and what an answer returns that breaks ties toward
the later position, keeps the smallest scores, or lets the recent positions compete for the
heavy hitters' places, are stored in ``data/keep_positions.json``.  The hidden tests check more.
"""
import numpy as np

from ._data import load

DATA = load("keep_positions")
HINTS = {"later_ties": "It looks like ties went to the later position: among equal scores keep the earlier one.",
         "smallest": "It looks like the smallest scores were kept: keep the largest.",
         "recent_compete": "It looks like the recent positions competed for the heavy hitters' places: choose "
                           "those among the positions between the sinks and the recent window only."}


def _inputs(case):
    return (np.array(case["acc_scores"], dtype=np.float64), case["budget"], case["n_sink"], case["n_recent"])


def _positions(value, what):
    assert isinstance(value, np.ndarray), (
        f"{what}: keep_positions should return a numpy array of positions, got {type(value).__name__}")
    assert value.ndim == 1 and value.dtype == np.int64, (
        f"{what}: keep_positions should return a 1-D int64 array, got shape {value.shape} and dtype {value.dtype}")
    return value.tolist()


def _matches(fn, name, what):
    """fn on the stored case ``name`` returns its expected positions (a stored mistake is named)."""
    case = DATA[name]
    got = _positions(fn(*_inputs(case)), what)
    want = case["expected"]
    if got != want:
        if sorted(got) == want:
            raise AssertionError(f"{what}: the right positions, but not in increasing order: sort them.")
        hint = next((" " + text for key, text in HINTS.items()
                     if case["mistakes"][key] == got and case["mistakes"][key] != want), "")
        raise AssertionError(f"{what}: expected {want}, got {got}.{hint}")


def check_worked_example(fn):
    _matches(fn, "worked_example", "the worked example")


def check_short(fn):
    _matches(fn, "short", "t <= budget: every position")


def check_ties(fn):
    _matches(fn, "ties", "equal scores: ties go to the earlier position")


def check_streaming(fn):
    _matches(fn, "streaming", "n_recent = budget - n_sink (StreamingLLM)")


def check_random(fn):
    _matches(fn, "random", "a random case")


def check_refuses(fn):
    scores = np.arange(10, dtype=np.float64)
    for args, why in (((4, 3, 2), "n_sink + n_recent > budget"), ((5, -1, 0), "a negative n_sink")):
        try:
            fn(scores, *args)
        except ValueError:
            continue
        raise AssertionError(f"keep_positions(scores, budget={args[0]}, n_sink={args[1]}, n_recent={args[2]}) "
                             f"should raise ValueError ({why})")


def check_inputs_unchanged(fn):
    scores = np.array(DATA["worked_example"]["acc_scores"], dtype=np.float64)
    scores.flags.writeable = False
    try:
        fn(scores, 5, 1, 2)
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your function wrote into acc_scores (it was read-only here); "
                                 "work on a copy instead") from None
        raise


CHECKS = [
    ("the worked example", check_worked_example),
    ("t <= budget keeps every position", check_short),
    ("ties go to the earlier position", check_ties),
    ("StreamingLLM: sinks and recent only", check_streaming),
    ("a random case", check_random),
    ("bad arguments raise ValueError", check_refuses),
    ("acc_scores is not modified", check_inputs_unchanged),
]
