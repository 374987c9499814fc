"""Public checks for the exercise ``causal_attention(Q, K, V)`` (chapter 1).

A few small cases; the expected values (and what two common mistakes return) are stored in
``data/causal_attention.json``.  The statement stresses what two of them check: scores of about
10^4 must not give nan, and Q, K and V are not modified.  The hidden tests check more.
"""
import numpy as np

from ._data import array, load, mistake

DATA = load("causal_attention")
HINTS = {"no_scale": "The scores seem not to be divided by sqrt(d), the width of the queries and keys.",
         "no_mask": "Every row seems to use all the tokens: apply the causal mask (-inf above the diagonal)."}


def _call(fn, case):
    return np.asarray(fn(array(case["Q"]), array(case["K"]), array(case["V"])), dtype=np.float64)


def _expect_close(got, case, what, tol=1e-9):
    expected = np.asarray(case["expected"])
    assert got.shape == expected.shape, f"{what}: expected shape {expected.shape}, got shape {got.shape}"
    assert np.all(np.isfinite(got)), f"{what}: the result contains nan or inf"
    gap = float(np.max(np.abs(got - expected)))
    if gap <= tol:
        return
    bad = int(np.argmax(np.max(np.abs(got - expected), axis=-1)))
    raise AssertionError(f"{what}: row {bad} should be {np.round(expected[bad], 6).tolist()}, "
                         f"got {np.round(got[bad], 6).tolist()} (off by up to {gap:.1e}).{mistake(case, got, HINTS)}")


def check_shape(fn):
    got = _call(fn, DATA["shape"])
    assert got.shape == (4, 3), (
        f"Q and K of shape (4, 2) and V of shape (4, 3) should give an output of shape (4, 3) "
        f"(one row per token, as wide as V); got shape {got.shape}")


def check_first_row(fn):
    case = DATA["first_row"]
    got = _call(fn, case)
    assert got.shape == (3, 2), f"expected shape (3, 2), got {got.shape}"
    first = array(case["V"])[0]
    gap = float(np.max(np.abs(got[0] - first)))
    assert gap < 1e-12, (
        f"row 0 should be exactly V[0] = {np.round(first, 6).tolist()} (the first token can only "
        f"attend to itself), got {np.round(got[0], 6).tolist()}. Is the causal mask applied?")


def check_three_tokens_by_hand(fn):
    case = DATA["three_tokens"]
    _expect_close(_call(fn, case), case, "the three tokens (1,0), (0,1), (1,1)")


def check_future_does_not_leak(fn):
    case = DATA["future"]
    changed = dict(case, K=array(case["K"]), V=array(case["V"]))
    changed["K"][-1] += 10.0                          # change only the last token
    changed["V"][-1] -= 10.0
    a, b = _call(fn, case), _call(fn, changed)
    assert a.shape == (5, 3) and b.shape == (5, 3), f"expected shape (5, 3), got {a.shape}"
    gap = float(np.max(np.abs(a[:4] - b[:4])))
    assert gap < 1e-12, (
        f"changing the key and value of the last token changed the earlier rows (by up to {gap:.2g}): "
        "token i must only see tokens 0..i. Apply the causal mask.")


def check_random_against_loop(fn):
    case = DATA["random"]
    _expect_close(_call(fn, case), case, "6 random tokens of width 4")


def check_large_scores(fn):
    case = DATA["large_scores"]
    with np.errstate(all="ignore"):
        got = _call(fn, case)
    if got.shape == np.shape(case["expected"]) and not np.all(np.isfinite(got)):
        raise AssertionError("with scores of about 10^4 the output holds nan or inf: exp(10^4) overflows. "
                             "Subtract each row's largest score before exp (the weights do not change).")
    _expect_close(got, case, "scores of about 10^4")


def check_inputs_unchanged(fn):
    case = DATA["three_tokens"]
    Q, K, V = array(case["Q"]), array(case["K"]), array(case["V"])
    _read_only_call(fn, (Q, K, V), "Q, K or V")
    assert np.array_equal(Q, case["Q"]) and np.array_equal(K, case["K"]) and np.array_equal(V, case["V"]), (
        "Q, K or V changed")


def _read_only_call(fn, args, what: str):
    """``fn(*args)`` with every array of ``args`` read-only: writing into one is named, not a crash."""
    for a in args:
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    try:
        return fn(*args)
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError(f"your function wrote into {what} (read-only here): leave the inputs as they "
                                 "are and compute new arrays") from None
        raise


CHECKS = [
    ("output shape: one row per token, as wide as V", check_shape),
    ("the first token attends only to itself", check_first_row),
    ("three tokens worked out by hand", check_three_tokens_by_hand),
    ("a later token does not change earlier rows", check_future_does_not_leak),
    ("random tokens: agrees with a row-by-row loop", check_random_against_loop),
    ("scores of about 10^4 give no nan", check_large_scores),
    ("Q, K and V are not modified", check_inputs_unchanged),
]
