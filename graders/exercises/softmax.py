"""Hidden tests of ``softmax(scores)`` (chapter 1).

Numerically stable softmax along the last axis, for 1-D and 2-D scores; exact for scores of
1e4 and -1e4, where exp(s) alone overflows or underflows.  The reference works one vector at a
time through the log-sum-exp, with Python's ``math.fsum`` for the sum: no code shared with an
answer's vectorised ``exp(s - max) / sum``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..checks import Fail, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test, case

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


def _check_values(inputs, expected, rtol, results):
    """Each case's output is the reference's."""
    for k, (scores, exp) in enumerate(zip(inputs, expected)):
        what = f"case {k + 1} of {len(inputs)} (shape {np.shape(scores)}): the output" if len(inputs) > 1 \
            else "the output"
        check_array(results[k].value, exp, what, rtol=rtol, atol=1e-15, hint=functools.partial(_diagnose, scores))


def _not_modified(inputs, results):
    unchanged(inputs[0], results[0].originals_after[0], "the input scores")


def _shape_dtype(inputs, results):
    for k, (inp, what) in enumerate(zip(inputs, ("1-D", "2-D"))):
        value = results[k].value
        if not isinstance(value, np.ndarray):
            raise Fail(f"for {what} scores the output is {describe(value)}; expected a numpy array")
        if value.shape != inp.shape:
            raise Fail(f"for {what} scores of shape {inp.shape} the output has shape {value.shape}; "
                       "expected the same shape as the input")
        if value.dtype != np.float64:
            raise Fail(f"for float64 scores the output has dtype {value.dtype}; expected float64")


def _with_right_answer(prop, inputs, results):
    """``prop`` counting only together with the right answer on the same calls."""
    right = functools.partial(_check_values, inputs, [reference(s) for s in inputs], 1e-9)
    return with_right_answer(functools.partial(prop, inputs), right)(results)


def values_test(name, points, inputs, *, rtol=1e-9) -> Test:
    return case(name, points, [Call(FN, (s,)) for s in inputs], _check_values, inputs,
                [reference(s) for s in inputs], rtol, step="case")


def property_test(name, points, inputs, prop, capture_args=False, **options) -> Test:
    """A property of the calls on ``inputs``, counting only together with the right answers."""
    return case(name, points, [Call(FN, (s,), capture_args) for s in inputs], _with_right_answer, prop, inputs,
                **options)


def _drawn(seed, *draws):
    """Arrays drawn in turn from a generator seeded with ``seed``: (shape, scale) each."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) * scale for shape, scale in draws]


def _random_cases(seed):
    """20 vectors then 20 tables of random sizes and scales."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(20):
        n = int(rng.integers(1, 12))
        cases.append(rng.standard_normal(n) * rng.choice([0.1, 1.0, 10.0, 300.0]))
    for _ in range(20):
        r, c = (int(v) for v in rng.integers(1, 9, size=2))
        cases.append(rng.standard_normal((r, c)) * rng.choice([0.1, 1.0, 10.0, 300.0]))
    return cases


def make_tests() -> list[Test]:
    return [
        values_test("small 1-D scores", 1, [np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.25, 2.0, 0.0]),
                                            np.array([-3.0, 3.0])]),
        values_test("one score gets weight 1", 1, [np.array([0.7]), np.array([-42.0])]),
        values_test("equal scores get equal weights", 1, [np.zeros(5), np.full(7, 3.5)]),
        values_test("2-D scores: a softmax of each row, along the last axis (3 x 5 and 4 x 2)", 2,
                    _drawn(2001, ((3, 5), 1), ((4, 2), 3))),
        values_test("large scores (up to 1e4) stay finite and exact", 2, [
            np.array([1e4, 1e4 - 1.0, 1e4 - 2.5]), np.array([[1e4, 0.0, -5.0], [2.0, 1e4 + 3.0, 1e4]])]),
        values_test("very negative scores (down to -1e4)", 1, [
            np.array([-1e4, -1e4 + 0.5, -1e4 - 2.0]), np.array([[-1e4, -1e4 - 1.0], [-2e4, -2e4]])]),
        values_test("scores of 1e4 and -1e4 together", 1, [np.array([1e4, -1e4, 0.0, 1e4 - 1.0])]),
        property_test("the input array is not modified", 1, _drawn(2002, ((4, 6), 5)), _not_modified,
                      capture_args=True),
        property_test("the output has the input's shape and dtype float64", 1, _drawn(2003, (6, 1), ((2, 7), 1)),
                      _shape_dtype, step="case"),
        values_test("integer scores", 1, [np.array([1, 2, 3]), np.array([[0, 5], [-2, 2]])]),
        values_test("40 random cases, 1-D and 2-D, sizes 1 to 11, scales 0.1 to 300", 2, _random_cases(2004)),
    ]


EXERCISE = Exercise(name="softmax", make_tests=make_tests)
