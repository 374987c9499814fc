"""Hidden tests of ``attend_step(x_t, cache, p)`` (chapter 2).

One decode step of one attention head with a KV cache: q, k, v = x_t W; append k and v as a new
row of the cache; scores = K q / sqrt(d); stable softmax; out = weights V.  Returns
``(out, new_cache)``; the input cache (the dict and its arrays) must not change.  Decoding token
by token must give the rows of full causal attention.

The reference below computes each step the long way, from the whole prefix of tokens (row t of
causal attention), so it shares no code path with an incremental answer.
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import Fail, check_array, describe
from ..registry import Exercise, Test
from ._decode_step import DecodeStep, arrays_unchanged, also_right, decoding, dict_unchanged, one_call, output, unpack

FN = "attend_step"


# ------------------------------------------------------------------------------- reference


def _weights(scores: np.ndarray) -> np.ndarray:
    """Softmax of a vector through the log-sum-exp: exp(s - (m + log sum exp(s - m)))."""
    m = float(np.max(scores))
    log_total = m + math.log(float(np.sum(np.exp(scores - m))))
    return np.exp(scores - log_total)


def _row(q, keys, values, scale=None):
    """Attention of one query over the given keys and values."""
    d = q.shape[0]
    scale = math.sqrt(d) if scale is None else scale
    scores = np.array([float(np.dot(key, q)) for key in keys]) / scale
    return _weights(scores) @ values


def causal_rows(X, p):
    """Row t of causal attention of the token sequence X, for every t: the expected outputs of
    decoding X token by token from an empty cache."""
    Q, K, V = X @ p["Wq"], X @ p["Wk"], X @ p["Wv"]
    return np.array([_row(Q[t], K[: t + 1], V[: t + 1]) for t in range(X.shape[0])])


def step(x, cache, p):
    """The expected (out, new k, new v) of one step from a given cache."""
    q, k, v = x @ p["Wq"], x @ p["Wk"], x @ p["Wv"]
    keys = np.vstack([cache["k"], k[None, :]])
    values = np.vstack([cache["v"], v[None, :]])
    return _row(q, keys, values), keys, values


# ---------------------------------------------------------------------------- diagnosis


def _diagnose(x, cache, p, actual):
    """Name a common mistake when ``actual`` matches it (said alongside the error)."""
    q, k, v = x @ p["Wq"], x @ p["Wk"], x @ p["Wv"]
    keys = np.vstack([cache["k"], k[None, :]])
    values = np.vstack([cache["v"], v[None, :]])
    d = q.shape[0]
    variants = {
        "it matches scores that are not divided by sqrt(d)": lambda: _row(q, keys, values, scale=1.0),
        "it matches scores divided by d instead of sqrt(d)": lambda: _row(q, keys, values, scale=d),
        "it matches attending over the old cache only: append the new key and value first":
            lambda: _row(q, cache["k"], cache["v"]) if cache["k"].shape[0] else None,
        "it matches keys and values swapped": lambda: _row(q, values, keys),
        "it matches a query made with Wk instead of Wq": lambda: _row(k, keys, values),
    }
    for text, make in variants.items():
        try:
            guess = make()
        except Exception:  # noqa: BLE001 - a variant that does not apply
            continue
        if guess is not None and guess.shape == actual.shape and np.allclose(actual, guess, rtol=1e-7, atol=1e-10):
            return text
    return None


# ------------------------------------------------------------------------------ checking


def _step_arrays(x, cache, p):
    """The reference's (out, new cache) of one step."""
    out, keys, values = step(x, cache, p)
    return out, {"k": keys, "v": values}


def _empty_cache(p):
    d = p["Wq"].shape[1]
    return {"k": np.zeros((0, d)), "v": np.zeros((0, d))}


STEP = DecodeStep(FN, ("k", "v"), _step_arrays, causal_rows, _empty_cache, _diagnose)


def _first_output(ex, args, results):
    output(ex, args, results, "the output of the first step")


def _new_cache_rows(ex, args, results):
    """The new cache is the old rows, then the new key and value as the last row."""
    _, keys, values = step(*args)
    _, new = unpack(ex, results[0].value)
    for key, expected, what in (("k", keys, "key"), ("v", values, "value")):
        arr = new[key]
        if not isinstance(arr, np.ndarray):
            raise Fail(f"new_cache[{key!r}] is {describe(arr)}; expected an array")
        if arr.ndim != 2 or arr.shape[1] != expected.shape[1]:
            raise Fail(f"new_cache[{key!r}] has shape {arr.shape}; expected (t + 1, d) = {expected.shape}")
        if arr.shape[0] != expected.shape[0]:
            raise Fail(f"new_cache[{key!r}] has {arr.shape[0]} rows; after one step from a cache of "
                       f"{expected.shape[0] - 1} rows it should have {expected.shape[0]}")
        other = values if key == "k" else keys
        if np.allclose(arr, other, rtol=1e-9, atol=1e-12) and not np.allclose(expected, other):
            raise Fail("new_cache['k'] and new_cache['v'] look swapped")
        check_array(arr[:-1], expected[:-1], f"the old rows of new_cache[{key!r}]")
        check_array(arr[-1], expected[-1], f"the last row of new_cache[{key!r}] (the new {what}, x_t W_{key})")


def _out_shape(ex, args, results):
    out, _ = unpack(ex, results[0].value)
    if not isinstance(out, np.ndarray):
        raise Fail(f"out is {describe(out)}; expected a numpy array of shape (d,) = (3,)")
    if out.shape != (3,):
        raise Fail(f"out has shape {out.shape}; expected (d,) = (3,), a vector, not a table")
    if out.dtype != np.float64:
        raise Fail(f"out has dtype {out.dtype}; expected float64 for float64 inputs")


def _structure(ex, args, results):
    _, new = unpack(ex, results[0].value)
    for key in ("k", "v"):
        arr = new[key]
        if not isinstance(arr, np.ndarray) or arr.shape != (2, 2):
            raise Fail(f"new_cache[{key!r}] is {describe(arr)}; expected an array of shape (t + 1, d) = (2, 2)")


# ------------------------------------------------------------------------------ the inputs


def _random_params(rng, D, d, scale=1.0):
    return {name: rng.standard_normal((D, d)) * scale for name in ("Wq", "Wk", "Wv")}


def _one_step(seed, D, d, t, scale=1.0):
    """(x_t, cache of t tokens, p) with model width D and head width d, drawn in that order from a
    generator seeded with ``seed``; ``scale`` multiplies the weights."""
    rng = np.random.default_rng(seed)
    x, p = rng.standard_normal(D), _random_params(rng, D, d, scale)
    if t == 0:
        return x, _empty_cache(p), p
    return x, {"k": rng.standard_normal((t, d)), "v": rng.standard_normal((t, d))}, p


def _runs(seed, *sizes):
    """Decoding runs (X, p), one per (T tokens, D, d), drawn in turn from one generator."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((T, D)), _random_params(rng, D, d)) for T, D, d in sizes]


def _large_scores_run(seed):
    """Five tokens whose scores are about 10^4: without subtracting the maximum, exp overflows."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((5, 4)) * 30.0
    return [(X, {"Wq": rng.standard_normal((4, 4)) * 10.0, "Wk": rng.standard_normal((4, 4)) * 10.0,
                 "Wv": rng.standard_normal((4, 4))})]


# The statement's worked example: D = d = 2, Wq = Wk = I, Wv = diag(1, 2).
WORKED_EXAMPLE = [(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
                   {"Wq": np.eye(2), "Wk": np.eye(2), "Wv": np.diag([1.0, 2.0])})]


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    return [
        decoding(STEP, "the worked example of the statement, three tokens one by one", 2, WORKED_EXAMPLE),
        one_call(STEP, "the first step, from an empty cache (t = 0): the output is the new value", 1,
                 _one_step(1001, D=4, d=3, t=0), _first_output),
        one_call(STEP, "one step from a cache of one token (t = 1)", 1, _one_step(1013, D=3, d=2, t=1), output),
        one_call(STEP, "one step from a cache of 5 tokens (D = 6, d = 4)", 1, _one_step(1002, D=6, d=4, t=5), output),
        one_call(STEP, "the new cache: the old rows, then the new key and value as the last row", 2,
                 _one_step(1003, D=5, d=3, t=4), _new_cache_rows),
        also_right(STEP, "the input cache dict is left as it was (same keys, same arrays)", 1,
                   _one_step(1004, D=4, d=2, t=3), dict_unchanged, capture_args=True),
        also_right(STEP, "the input cache arrays (and x_t, p) are not modified in place", 1,
                   _one_step(1005, D=3, d=3, t=6), arrays_unchanged, capture_args=True),
        decoding(STEP, "decoding 9 tokens one by one gives the rows of causal attention (D = 7, d = 5)", 3,
                 _runs(1006, (9, 7, 5))),
        decoding(STEP, "head width d = 1 (6 tokens, D = 3)", 1, _runs(1007, (6, 3, 1))),
        decoding(STEP, "large scores (about 10^4): the softmax must be stable", 1, _large_scores_run(1008)),
        also_right(STEP, "out has shape (d,) and dtype float64", 1, _one_step(1009, D=5, d=3, t=2), _out_shape),
        also_right(STEP, "returns (out, new_cache), new_cache a dict of 'k' and 'v' of shape (t + 1, d)", 1,
                   _one_step(1010, D=4, d=2, t=1), _structure),
        one_call(STEP, "one step from a long cache (t = 300, D = 16, d = 8)", 1,
                 _one_step(1011, D=16, d=8, t=300, scale=0.25), output),
        decoding(STEP, "six random decoding runs of non-round sizes (D from 2 to 11, d from 2 to 7)", 3,
                 _runs(1012, (4, 3, 2), (6, 5, 7), (11, 8, 3), (3, 2, 5), (7, 11, 6), (13, 4, 4))),
    ]


EXERCISE = Exercise(name="attend_step", make_tests=make_tests)
