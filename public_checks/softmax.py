"""Public checks for the exercise ``softmax(scores)`` (chapter 1).

A few small cases; the expected values are stored in ``data/softmax.json``.  The statement
stresses what these check too: stable for huge and very negative scores, float64 weights (integer
scores too), and the array given left as it was.  The hidden tests check more (other shapes, many
random cases).
"""
import numpy as np

from ._data import array, load

DATA = load("softmax")


def _result(fn, scores):
    """Call the learner's softmax on a fresh float64 array and return an ndarray."""
    return np.asarray(fn(array(scores)), dtype=np.float64)


def _expect_close(got, expected, what, tol=1e-9):
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, (
        f"{what}: expected an array of shape {expected.shape}, got shape {got.shape}")
    assert np.all(np.isfinite(got)), f"{what}: the result contains nan or inf: {got}"
    gap = float(np.max(np.abs(got - expected)))
    assert gap <= tol, (
        f"{what}: expected {np.round(expected, 6).tolist()}, got {np.round(got, 6).tolist()} "
        f"(off by up to {gap:.1e})")


def check_sums_to_one(fn):
    got = _result(fn, [1.0, 2.0, 3.0])
    assert got.shape == (3,), f"three scores should give three weights, got an array of shape {got.shape}"
    assert np.all(np.isfinite(got)), f"the weights contain nan or inf: {got}"
    assert np.all(got > 0), f"every weight should be positive, got {got.tolist()}"
    total = float(got.sum())
    assert abs(total - 1.0) < 1e-12, f"the weights should sum to 1, they sum to {total!r}"


def check_hand_values(fn):
    for case in DATA["hand_values"]:
        _expect_close(_result(fn, case["scores"]), case["expected"], case["what"])


def check_rows_of_a_table(fn):
    case = DATA["table"]
    got = _result(fn, case["scores"])
    assert got.shape == (3, 2), (
        f"a (3, 2) table of scores should give a (3, 2) table of weights, got shape {got.shape}")
    row_sums = got.sum(axis=-1)
    if not np.allclose(row_sums, 1.0):
        col_sums = got.sum(axis=0)
        hint = (" Your columns sum to 1: take the softmax along the last axis (each row), "
                "for example with axis=-1 and keepdims=True."
                if np.allclose(col_sums, 1.0) else
                " Take the max and the sum along the last axis with keepdims=True.")
        raise AssertionError(f"each row should sum to 1, the row sums are {np.round(row_sums, 6).tolist()}.{hint}")
    _expect_close(got, case["expected"], "softmax of each row")


def _check_extreme(fn, case, what, flows):
    with np.errstate(all="ignore"):
        got = _result(fn, case["scores"])
    assert np.all(np.isfinite(got)), (
        f"{what} gave {got.tolist()}: {flows}. Subtract the largest score from every score before taking exp.")
    _expect_close(got, case["expected"], what)


def check_huge_scores(fn):
    _check_extreme(fn, DATA["huge"], "softmax([1e4, 1e4 - 1])", "np.exp(1e4) overflows to inf")


def check_very_negative_scores(fn):
    _check_extreme(fn, DATA["very_negative"], "softmax([-1e4, -1e4 - 1])",
                   "np.exp(-1e4) underflows to 0, and 0/0 is nan")


def check_integers_and_input_kept(fn):
    case = next(c for c in DATA["hand_values"] if c["scores"] == [1.0, 2.0, 3.0])
    scores = np.array([1, 2, 3])
    scores.flags.writeable = False
    try:
        got = fn(scores)
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your softmax wrote into the array it was given (read-only here): an in-place "
                                 "scores -= scores.max() changes the caller's scores; compute a new array, "
                                 "scores - scores.max()") from None
        raise
    got = np.asarray(got)
    assert got.dtype == np.float64, f"the integer scores [1, 2, 3] should give float64 weights, got dtype {got.dtype}"
    _expect_close(got, case["expected"], "softmax of the integers [1, 2, 3]")
    assert scores.tolist() == [1, 2, 3], f"the scores given changed: {scores.tolist()}"


CHECKS = [
    ("three scores give positive weights that sum to 1", check_sums_to_one),
    ("matches values worked out by hand", check_hand_values),
    ("a 2-D table: the softmax of each row", check_rows_of_a_table),
    ("stable for huge scores [1e4, 1e4 - 1]", check_huge_scores),
    ("stable for very negative scores [-1e4, -1e4 - 1]", check_very_negative_scores),
    ("integer scores give float64 weights, and the array given is left as it was", check_integers_and_input_kept),
]
