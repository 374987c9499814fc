"""Hidden tests of ``causal_attention(Q, K, V)`` (chapter 1).

Q, K, V of shape (T, d): scores Q K^T / sqrt(d), a causal mask (row t attends to tokens 0..t),
a stable softmax along each row, and the (T, d) output.  The reference attends row by row over
the prefix ``K[:t + 1]`` (no mask at all, so no code shared with a masked matrix answer) with a
log-sum-exp softmax.
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import Fail, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test

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


def _values_test(name, points, cases):
    expected = [reference(*c) for c in cases]

    def check(results):
        for k, ((Q, K, V), exp) in enumerate(zip(cases, expected)):
            what = (f"case {k + 1} of {len(cases)} (T = {Q.shape[0]}, d = {Q.shape[1]}): the output"
                    if len(cases) > 1 else "the output")
            check_array(results[k].value, exp, what, hint=lambda a, c=(Q, K, V): _diagnose(*c, a))
    return Test(name, points, [Call(FN, c) for c in cases], check, step="case")


def _qkv(rng, T, d, scale=1.0):
    return tuple(rng.standard_normal((T, d)) * scale for _ in range(3))


def make_tests() -> list[Test]:
    tests = []
    # The three tokens of seed 001's example, as a prefill: Q = K = X, V = X diag(1, 2).
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    tests.append(_values_test("three tokens of width 2 (chapter 2's worked example as a prefill)", 1,
                              [(X, X.copy(), X @ np.diag([1.0, 2.0]))]))
    rng = np.random.default_rng(3001)
    tests.append(_values_test("one token (T = 1): the output is V", 1, [_qkv(rng, 1, 4), _qkv(rng, 1, 1)]))
    rng = np.random.default_rng(3002)
    tests.append(_values_test("head width d = 1", 1, [_qkv(rng, 5, 1), _qkv(rng, 2, 1)]))
    rng = np.random.default_rng(3003)
    tests.append(_values_test("the causal mask: row t attends to tokens 0..t only (T = 6, d = 3)", 2,
                              [_qkv(rng, 6, 3, 2.0)]))
    rng = np.random.default_rng(3004)
    tests.append(_values_test("non-square sizes (T = 7, d = 5; T = 13, d = 3; T = 2, d = 9)", 2,
                              [_qkv(rng, 7, 5), _qkv(rng, 13, 3), _qkv(rng, 2, 9)]))
    rng = np.random.default_rng(3005)
    Q, K, V = _qkv(rng, 5, 4)
    tests.append(_values_test("large scores (about 1e4): the softmax must be stable", 1,
                              [(Q * 80.0, K * 80.0, V), (Q * -80.0, K * 80.0, V)]))

    rng = np.random.default_rng(3006)
    Q, K, V = _qkv(rng, 4, 3)

    def not_modified(results, Q=Q, K=K, V=V):
        original = results[0].originals_after
        for name, arr, after in zip("QKV", (Q, K, V), original):
            unchanged(arr, after, name)
    tests.append(Test("Q, K and V are not modified", 1, [Call(FN, (Q, K, V), capture_args=True)],
                      with_right_answer(not_modified, _values_test("", 0, [(Q, K, V)]).check)))

    rng = np.random.default_rng(3007)
    Q, K, V = _qkv(rng, 6, 2)

    def shape_dtype(results):
        value = results[0].value
        if not isinstance(value, np.ndarray):
            raise Fail(f"the output is {describe(value)}; expected a numpy array of shape (T, d) = (6, 2)")
        if value.shape != (6, 2):
            raise Fail(f"the output has shape {value.shape}; expected (T, d) = (6, 2)")
        if value.dtype != np.float64:
            raise Fail(f"the output has dtype {value.dtype}; expected float64")
    tests.append(Test("the output has shape (T, d) and dtype float64", 1, [Call(FN, (Q, K, V))],
                      with_right_answer(shape_dtype, _values_test("", 0, [(Q, K, V)]).check)))

    rng = np.random.default_rng(3008)
    cases = []
    for _ in range(25):
        T, d = int(rng.integers(1, 17)), int(rng.integers(1, 9))
        cases.append(_qkv(rng, T, d, float(rng.choice([0.5, 1.0, 3.0]))))
    tests.append(_values_test("25 random cases (T from 1 to 16, d from 1 to 8)", 2, cases))
    return tests


EXERCISE = Exercise(name="causal_attention", make_tests=make_tests)
