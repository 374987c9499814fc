"""Hidden tests of ``causal_attention(Q, K, V)`` (chapter 1).

Q, K, V of shape (T, d): scores Q K^T / sqrt(d), a causal mask (row t attends to tokens 0..t),
a stable softmax along each row, and the (T, d) output.  The reference attends row by row over
the prefix ``K[:t + 1]`` (no mask at all, so no code shared with a masked matrix answer) with a
log-sum-exp softmax.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..checks import Fail, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test, case

FN = "causal_attention"


def _weights(s: np.ndarray) -> np.ndarray:
    m = float(np.max(s))
    return np.exp(s - (m + math.log(float(np.sum(np.exp(s - m))))))


def reference(Q, K, V, *, scale=None, causal=True, strict=False) -> np.ndarray:
    """Row t: softmax over keys 0..t of q_t . k_j / sqrt(d), times V.  The keyword arguments
    make the common mistakes, for the feedback."""
    T, d = Q.shape
    scale = math.sqrt(d) if scale is None else scale
    rows = []
    for t in range(T):
        last = (t if strict else t + 1) if causal else T
        if last == 0:
            rows.append(np.zeros(V.shape[1]))
            continue
        scores = np.array([float(np.dot(Q[t], K[j])) for j in range(last)]) / scale
        rows.append(_weights(scores) @ V[:last])
    return np.array(rows)


def _diagnose(Q, K, V, actual) -> str | None:
    """Name the mistake(s) ``actual`` matches: the mask left out, turned, or hiding the diagonal,
    and the scores scaled by 1 or by d instead of sqrt(d)."""
    if not np.all(np.isfinite(actual)):
        return "exp overflowed or 0/0 happened: subtract each row's maximum score before exp"
    d = Q.shape[1]
    masks = {"": {}, "without the causal mask (row t may only look at tokens 0..t)": {"causal": False},
             "with a mask that also hides each token from itself (row t attends to 0..t inclusive)":
                 {"strict": True}}
    scales = {"": None, "with scores not divided by sqrt(d)": 1.0,
              "with scores divided by d instead of sqrt(d)": float(d)}
    for mask_text, mask in masks.items():
        for scale_text, scale in scales.items():
            if not mask_text and not scale_text:
                continue
            guess = reference(Q, K, V, scale=scale, **mask)
            if guess.shape == actual.shape and np.allclose(actual, guess, rtol=1e-7, atol=1e-10):
                return "it matches attention " + " and ".join(t for t in (mask_text, scale_text) if t)
    turned = reference(Q[::-1], K[::-1], V[::-1])[::-1]
    if turned.shape == actual.shape and np.allclose(actual, turned, rtol=1e-7, atol=1e-10):
        return "it matches the mask turned the wrong way (row t looking at tokens t..T-1)"
    return None


def _check_values(cases, expected, results):
    """Each case's output is the reference's."""
    for k, ((Q, K, V), exp) in enumerate(zip(cases, expected)):
        what = (f"case {k + 1} of {len(cases)} (T = {Q.shape[0]}, d = {Q.shape[1]}): the output"
                if len(cases) > 1 else "the output")
        check_array(results[k].value, exp, what, hint=functools.partial(_diagnose, Q, K, V))


def _not_modified(args, results):
    original = results[0].originals_after
    for name, arr, after in zip("QKV", args, original):
        unchanged(arr, after, name)


def _shape_dtype(args, results):
    value = results[0].value
    if not isinstance(value, np.ndarray):
        raise Fail(f"the output is {describe(value)}; expected a numpy array of shape (T, d) = (6, 2)")
    if value.shape != (6, 2):
        raise Fail(f"the output has shape {value.shape}; expected (T, d) = (6, 2)")
    if value.dtype != np.float64:
        raise Fail(f"the output has dtype {value.dtype}; expected float64")


def _with_right_answer(prop, args, results):
    """``prop`` counting only together with the right answer on the same call."""
    right = functools.partial(_check_values, [args], [reference(*args)])
    return with_right_answer(functools.partial(prop, args), right)(results)


def values_test(name, points, cases) -> Test:
    return case(name, points, [Call(FN, c) for c in cases], _check_values, cases, [reference(*c) for c in cases],
                step="case")


def property_test(name, points, args, prop, capture_args=False) -> Test:
    """A property of one call, counting only together with the right answer."""
    return case(name, points, [Call(FN, args, capture_args)], _with_right_answer, prop, args)


def _qkv(rng, T, d, scale=1.0):
    return tuple(rng.standard_normal((T, d)) * scale for _ in range(3))


def _cases(seed, *sizes):
    """One (Q, K, V) per (T, d[, scale]), drawn in turn from a generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    return [_qkv(rng, *size) for size in sizes]


def _large_scores(seed):
    """Scores of about 1e4, of both signs."""
    Q, K, V = _qkv(np.random.default_rng(seed), 5, 4)
    return [(Q * 80.0, K * 80.0, V), (Q * -80.0, K * 80.0, V)]


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        T, d = int(rng.integers(1, 17)), int(rng.integers(1, 9))
        cases.append(_qkv(rng, T, d, float(rng.choice([0.5, 1.0, 3.0]))))
    return cases


# The three tokens of chapter 2's example, as a prefill: Q = K = X, V = X diag(1, 2).
X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
WORKED_EXAMPLE = (X, X.copy(), X @ np.diag([1.0, 2.0]))


def make_tests() -> list[Test]:
    return [
        values_test("three tokens of width 2 (chapter 2's worked example as a prefill)", 1, [WORKED_EXAMPLE]),
        values_test("one token (T = 1): the output is V", 1, _cases(3001, (1, 4), (1, 1))),
        values_test("head width d = 1", 1, _cases(3002, (5, 1), (2, 1))),
        values_test("the causal mask: row t attends to tokens 0..t only (T = 6, d = 3)", 2, _cases(3003, (6, 3, 2.0))),
        values_test("non-square sizes (T = 7, d = 5; T = 13, d = 3; T = 2, d = 9)", 2,
                    _cases(3004, (7, 5), (13, 3), (2, 9))),
        values_test("large scores (about 1e4): the softmax must be stable", 1, _large_scores(3005)),
        property_test("Q, K and V are not modified", 1, *_cases(3006, (4, 3)), _not_modified, capture_args=True),
        property_test("the output has shape (T, d) and dtype float64", 1, *_cases(3007, (6, 2)), _shape_dtype),
        values_test("25 random cases (T from 1 to 16, d from 1 to 8)", 2, _random_cases(3008, 25)),
    ]


EXERCISE = Exercise(name="causal_attention", make_tests=make_tests)
