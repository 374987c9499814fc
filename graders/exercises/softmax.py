"""Hidden tests of ``softmax(scores)`` (chapter 1).

Numerically stable softmax along the last axis, for 1-D and 2-D scores; exact for scores of
1e4 and -1e4, where exp(s) alone overflows or underflows.  The reference works one vector at a
time through the log-sum-exp, with Python's ``math.fsum`` for the sum: no code shared with an
answer's vectorised ``exp(s - max) / sum``.
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import Fail, as_array, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test

FN = "softmax"


def _vector(s) -> np.ndarray:
    m = max(float(v) for v in s)
    log_total = m + math.log(math.fsum(math.exp(float(v) - m) for v in s))
    return np.array([math.exp(float(v) - log_total) for v in s])


def reference(scores) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        return _vector(scores)
    return np.array([_vector(row) for row in scores.reshape(-1, scores.shape[-1])]).reshape(scores.shape)


def _diagnose(scores, actual) -> str | None:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 2 and s.shape[0] > 1:
        e = np.exp(s - s.max(axis=0, keepdims=True))
        if np.allclose(actual, e / e.sum(axis=0, keepdims=True), rtol=1e-7, atol=1e-12):
            return "it matches a softmax down each column (axis 0); normalise along the last axis (each row)"
        e = np.exp(s - s.max())
        if np.allclose(actual, e / e.sum(), rtol=1e-7, atol=1e-12):
            return "it matches one softmax over the whole table; normalise each row separately"
    if not np.all(np.isfinite(actual)):
        return "exp overflowed or 0/0 happened: subtract each row's maximum score before exp"
    return None


def _values_test(name, points, inputs, *, rtol=1e-9):
    expected = [reference(s) for s in inputs]

    def check(results):
        for k, (scores, exp) in enumerate(zip(inputs, expected)):
            what = f"case {k + 1} of {len(inputs)} (shape {np.shape(scores)}): the output" if len(inputs) > 1 \
                else "the output"
            check_array(results[k].value, exp, what, rtol=rtol, atol=1e-15,
                        hint=lambda a, s=scores: _diagnose(s, a))
    return Test(name, points, [Call(FN, (s,)) for s in inputs], check, step="case")


def make_tests() -> list[Test]:
    tests = []
    tests.append(_values_test("small 1-D scores", 1, [
        np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.25, 2.0, 0.0]), np.array([-3.0, 3.0])]))
    tests.append(_values_test("one score gets weight 1", 1, [np.array([0.7]), np.array([-42.0])]))
    tests.append(_values_test("equal scores get equal weights", 1, [np.zeros(5), np.full(7, 3.5)]))
    rng = np.random.default_rng(2001)
    tests.append(_values_test("2-D scores: a softmax of each row, along the last axis (3 x 5 and 4 x 2)", 2,
                              [rng.standard_normal((3, 5)), rng.standard_normal((4, 2)) * 3]))
    tests.append(_values_test("large scores (up to 1e4) stay finite and exact", 2, [
        np.array([1e4, 1e4 - 1.0, 1e4 - 2.5]), np.array([[1e4, 0.0, -5.0], [2.0, 1e4 + 3.0, 1e4]])]))
    tests.append(_values_test("very negative scores (down to -1e4)", 1, [
        np.array([-1e4, -1e4 + 0.5, -1e4 - 2.0]), np.array([[-1e4, -1e4 - 1.0], [-2e4, -2e4]])]))
    tests.append(_values_test("scores of 1e4 and -1e4 together", 1, [np.array([1e4, -1e4, 0.0, 1e4 - 1.0])]))

    rng = np.random.default_rng(2002)
    scores = rng.standard_normal((4, 6)) * 5

    def not_modified(results, scores=scores):
        unchanged(scores, results[0].originals_after[0], "the input scores")
    tests.append(Test("the input array is not modified", 1, [Call(FN, (scores,), capture_args=True)],
                      with_right_answer(not_modified, _values_test("", 0, [scores]).check)))

    rng = np.random.default_rng(2003)
    one_d, two_d = rng.standard_normal(6), rng.standard_normal((2, 7))

    def shape_dtype(results):
        for k, (inp, what) in enumerate(((one_d, "1-D"), (two_d, "2-D"))):
            value = results[k].value
            if not isinstance(value, np.ndarray):
                raise Fail(f"for {what} scores the output is {describe(value)}; expected a numpy array")
            if value.shape != inp.shape:
                raise Fail(f"for {what} scores of shape {inp.shape} the output has shape {value.shape}; "
                           "expected the same shape as the input")
            if value.dtype != np.float64:
                raise Fail(f"for float64 scores the output has dtype {value.dtype}; expected float64")
    tests.append(Test("the output has the input's shape and dtype float64", 1,
                      [Call(FN, (one_d,)), Call(FN, (two_d,))],
                      with_right_answer(shape_dtype, _values_test("", 0, [one_d, two_d]).check), step="case"))

    tests.append(_values_test("integer scores", 1, [np.array([1, 2, 3]), np.array([[0, 5], [-2, 2]])]))

    rng = np.random.default_rng(2004)
    cases = []
    for _ in range(20):
        n = int(rng.integers(1, 12))
        cases.append(rng.standard_normal(n) * rng.choice([0.1, 1.0, 10.0, 300.0]))
    for _ in range(20):
        r, c = (int(v) for v in rng.integers(1, 9, size=2))
        cases.append(rng.standard_normal((r, c)) * rng.choice([0.1, 1.0, 10.0, 300.0]))
    tests.append(_values_test("40 random cases, 1-D and 2-D, sizes 1 to 11, scales 0.1 to 300", 2, cases))
    return tests


EXERCISE = Exercise(name="softmax", make_tests=make_tests)
