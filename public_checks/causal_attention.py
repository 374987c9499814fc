"""Public checks for the exercise ``causal_attention(Q, K, V)`` (chapter 1).

A few small cases; the expected values are worked out by hand or with a few lines of
plain numpy (``_reference.py``), never with the course's engine.  The hidden tests check more.
"""
import math

import numpy as np

from ._reference import causal_rows as _reference


def _call(fn, Q, K, V):
    args = [np.array(a, dtype=np.float64) for a in (Q, K, V)]
    return np.asarray(fn(*args), dtype=np.float64)


def _no_mask(Q, K, V):
    """Attention without the causal mask, to recognise a missing mask."""
    Q, K, V = (np.asarray(a, dtype=np.float64) for a in (Q, K, V))
    S = Q @ K.T / math.sqrt(Q.shape[1])
    W = np.exp(S - S.max(axis=1, keepdims=True))
    return (W / W.sum(axis=1, keepdims=True)) @ V


def _expect_close(got, expected, what, Q=None, K=None, V=None, tol=1e-9):
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: expected shape {expected.shape}, got shape {got.shape}"
    assert np.all(np.isfinite(got)), f"{what}: the result contains nan or inf"
    gap = float(np.max(np.abs(got - expected)))
    if gap <= tol:
        return
    hint = ""
    if Q is not None:
        if np.allclose(got, _reference(Q, K, V, scale=False), atol=1e-9):
            hint = " The scores seem not to be divided by sqrt(d), the width of the queries and keys."
        elif np.allclose(got, _no_mask(Q, K, V), atol=1e-9):
            hint = " Every row seems to use all the tokens: apply the causal mask (-inf above the diagonal)."
    bad = int(np.argmax(np.max(np.abs(got - expected), axis=-1)))
    raise AssertionError(f"{what}: row {bad} should be {np.round(expected[bad], 6).tolist()}, "
                         f"got {np.round(got[bad], 6).tolist()} (off by up to {gap:.1e}).{hint}")


def check_shape(fn):
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(4, 2)), rng.normal(size=(4, 2)), rng.normal(size=(4, 3))
    got = _call(fn, Q, K, V)
    assert got.shape == (4, 3), (
        f"Q and K of shape (4, 2) and V of shape (4, 3) should give an output of shape (4, 3) "
        f"(one row per token, as wide as V); got shape {got.shape}")


def check_first_row(fn):
    rng = np.random.default_rng(2)
    Q, K, V = (rng.normal(size=(3, 2)) for _ in range(3))
    got = _call(fn, Q, K, V)
    assert got.shape == (3, 2), f"expected shape (3, 2), got {got.shape}"
    gap = float(np.max(np.abs(got[0] - V[0])))
    assert gap < 1e-12, (
        f"row 0 should be exactly V[0] = {np.round(V[0], 6).tolist()} (the first token can only "
        f"attend to itself), got {np.round(got[0], 6).tolist()}. Is the causal mask applied?")


def check_three_tokens_by_hand(fn):
    Q = K = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    V = [[1.0, 0.0], [0.0, 2.0], [1.0, 2.0]]
    r = math.exp(1 / math.sqrt(2))        # the weight ratio between scores that differ by 1/sqrt(2)
    expected = [[1.0, 0.0],
                [1 / (1 + r), 2 * r / (1 + r)],             # weights (1, r) / (1 + r)
                [(1 + r) / (2 + r), (2 + 2 * r) / (2 + r)]]  # weights (1, 1, r) / (2 + r)
    _expect_close(_call(fn, Q, K, V), expected, "the three tokens (1,0), (0,1), (1,1)", Q, K, V)


def check_future_does_not_leak(fn):
    rng = np.random.default_rng(3)
    Q, K, V = (rng.normal(size=(5, 3)) for _ in range(3))
    K2, V2 = K.copy(), V.copy()
    K2[-1], V2[-1] = K[-1] + 10.0, V[-1] - 10.0       # change only the last token
    a, b = _call(fn, Q, K, V), _call(fn, Q, K2, V2)
    assert a.shape == (5, 3) and b.shape == (5, 3), f"expected shape (5, 3), got {a.shape}"
    gap = float(np.max(np.abs(a[:4] - b[:4])))
    assert gap < 1e-12, (
        f"changing the key and value of the last token changed the earlier rows (by up to {gap:.2g}): "
        "token i must only see tokens 0..i. Apply the causal mask.")


def check_random_against_loop(fn):
    rng = np.random.default_rng(4)
    Q, K, V = (rng.normal(size=(6, 4)) for _ in range(3))
    _expect_close(_call(fn, Q, K, V), _reference(Q, K, V), "6 random tokens of width 4", Q, K, V)


CHECKS = [
    ("output shape: one row per token, as wide as V", check_shape),
    ("the first token attends only to itself", check_first_row),
    ("three tokens worked out by hand", check_three_tokens_by_hand),
    ("a later token does not change earlier rows", check_future_does_not_leak),
    ("random tokens: agrees with a row-by-row loop", check_random_against_loop),
]
