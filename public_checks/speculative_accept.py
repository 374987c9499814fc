"""Public checks for the exercise ``speculative_accept(draft_tokens, q_probs, p_probs, uniforms)``
(chapter 15).

A few small cases; the expected tokens, and what an answer returns that draws the replacement
from p itself, or with the uniform that rejected, or that adds no token after a fully accepted
draft, are stored in ``data/speculative_accept.json``.  The hidden tests check more.
"""
import numpy as np

from ._data import load

DATA = load("speculative_accept")
HINTS = {"from_p": "It looks like the replacement was drawn from p_probs[i] itself: after a rejection, "
                   "draw from max(0, p_probs[i] - q_probs[i]).",
         "rejecting_uniform": "It looks like the replacement was drawn with uniforms[i], the number that "
                              "rejected the draft token: use uniforms[k].",
         "no_bonus": "It looks like no token was added after a fully accepted draft: add one drawn from "
                     "p_probs[k]."}


def _inputs(case):
    """Fresh arrays of the case's inputs (q_probs of shape (0, V) when there is no draft)."""
    p = np.array(case["p_probs"], dtype=np.float64)
    q = np.array(case["q_probs"], dtype=np.float64).reshape(len(case["draft_tokens"]), p.shape[1])
    return (np.array(case["draft_tokens"], dtype=np.int64), q, p,
            np.array(case["uniforms"], dtype=np.float64))


def _tokens(value, what):
    assert isinstance(value, (list, tuple, np.ndarray)), (
        f"{what}: speculative_accept should return a list of token ids, got {type(value).__name__}")
    got = np.asarray(value).tolist()
    assert all(isinstance(t, int) and not isinstance(t, bool) for t in got), (
        f"{what}: the tokens should be ints, got {got}")
    return got


def _matches(fn, name, what):
    """fn on the stored case ``name`` returns its expected tokens (a stored mistake is named)."""
    case = DATA[name]
    got = _tokens(fn(*_inputs(case)), what)
    want = case["expected"]
    if got != want:
        hint = next((" " + text for key, text in HINTS.items()
                     if case["mistakes"][key] == got and case["mistakes"][key] != want), "")
        raise AssertionError(f"{what}: expected {want}, got {got}.{hint}")


def check_worked_example(fn):
    _matches(fn, "worked_example", "the worked example, uniforms (0.9, 0.7, 0.5)")


def check_all_accepted(fn):
    _matches(fn, "worked_example_all_accepted", "the worked example, uniforms (0.9, 0.5, 0.5)")


def check_first_rejected(fn):
    _matches(fn, "first_rejected", "the first draft token rejected")


def check_no_draft(fn):
    _matches(fn, "no_draft", "k = 0 (no draft): one token drawn from p_probs[0]")


def check_greedy(fn):
    _matches(fn, "greedy", "one-hot q and p (greedy verification)")


def check_random(fn):
    _matches(fn, "random", "a random case, k = 4 over 6 tokens")


def check_inputs_unchanged(fn):
    args = _inputs(DATA["worked_example"])
    for a in args:
        a.flags.writeable = False
    try:
        fn(*args)
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your function wrote into one of its inputs (they were read-only here); "
                                 "work on copies instead") from None
        raise


CHECKS = [
    ("the worked example: a draft token rejected", check_worked_example),
    ("the worked example: the whole draft accepted", check_all_accepted),
    ("the first draft token rejected", check_first_rejected),
    ("no draft (k = 0)", check_no_draft),
    ("one-hot distributions keep greedy's tokens", check_greedy),
    ("a random case", check_random),
    ("the inputs are not modified", check_inputs_unchanged),
]
