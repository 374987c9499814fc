"""Hidden tests of ``latent_attend_step(x_t, cache, p, n_heads)`` (chapter 12).

One decode step of multi-head latent attention whose cache keeps only the latents: c_t = x_t
Wdkv is appended to the cache's rows C; every head h attends with its query q_h (columns
h d .. (h+1) d of x_t Wq) over the keys C Wuk and the values C Wuv of the same columns, scores
scaled by 1 / sqrt(d), a stable softmax; the heads' outputs side by side.  Returns ``(out,
new_cache)`` with ``new_cache == {"c": (t + 1, r)}``; the input cache is left as it was.
Decoding token by token must give the rows of full causal multi-head attention.

The reference computes that full attention the long way: the keys and values of every head
rebuilt from the latents of the whole prefix, one score at a time, a log-sum-exp softmax.  It
shares no code with an absorbed answer (nor with the course's engine or its solution).
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import Fail, check_array, describe
from ..registry import Exercise, Test
from ._decode_step import DecodeStep, arrays_unchanged, also_right, decoding, dict_unchanged, one_call, output, unpack

FN = "latent_attend_step"


# ------------------------------------------------------------------------------- reference


def _softmax(scores: np.ndarray) -> np.ndarray:
    """exp(s - (m + log sum exp(s - m))) of a vector."""
    m = float(np.max(scores))
    return np.exp(scores - (m + math.log(float(np.sum(np.exp(scores - m))))))


def _head_row(q, keys, values, scale):
    """One head's attention of one query over the given keys and values."""
    scores = np.array([float(np.dot(key, q)) for key in keys]) / scale
    return _softmax(scores) @ values


def _row(x, C, p, n_heads, scale=None, heads=None):
    """The output of the last token x over the latents C (its own row included): every head's
    keys and values rebuilt from C, the heads side by side.  ``scale`` (default sqrt(d)) and
    ``heads`` (which columns of Wuk and Wuv a head reads) are for the diagnosis of mistakes."""
    d = p["Wq"].shape[1] // n_heads
    q = x @ p["Wq"]
    parts = []
    for h in range(n_heads):
        cols = slice(h * d, (h + 1) * d)
        kcols = cols if heads is None else heads(h, d)
        keys, values = C @ p["Wuk"][:, kcols], C @ p["Wuv"][:, kcols]
        parts.append(_head_row(q[cols], keys, values, math.sqrt(d) if scale is None else scale))
    return np.concatenate(parts)


def causal_rows(X, p, n_heads):
    """Row t of full causal multi-head attention of the tokens X with K = C Wuk, V = C Wuv,
    C = X Wdkv: the expected outputs of decoding X token by token from an empty cache."""
    C = X @ p["Wdkv"]
    return np.array([_row(X[t], C[: t + 1], p, n_heads) for t in range(X.shape[0])])


def step(x, cache, p, n_heads):
    """The expected (out, new latents) of one step from a given cache."""
    C = np.vstack([cache["c"], (x @ p["Wdkv"])[None, :]])
    return _row(x, C, p, n_heads), C


# ---------------------------------------------------------------------------- diagnosis


def _diagnose(x, cache, p, n_heads, actual):
    """Name a common mistake when ``actual`` matches it (said alongside the error)."""
    C = np.vstack([cache["c"], (x @ p["Wdkv"])[None, :]])
    r, Hd = p["Wuk"].shape
    swapped = {"Wq": p["Wq"], "Wdkv": p["Wdkv"], "Wuk": p["Wuv"], "Wuv": p["Wuk"]}
    variants = {
        "it matches scores that are not divided by sqrt(d)": lambda: _row(x, C, p, n_heads, scale=1.0),
        "it matches scores divided by sqrt(r), the latent width, instead of sqrt(d), the head width":
            lambda: _row(x, C, p, n_heads, scale=math.sqrt(r)),
        "it matches scores divided by sqrt(H d), the width of all heads, instead of sqrt(d)":
            lambda: _row(x, C, p, n_heads, scale=math.sqrt(Hd)),
        "it matches attending over the old cache only: append the new latent first":
            lambda: _row(x, cache["c"], p, n_heads) if cache["c"].shape[0] else None,
        "it matches Wuk and Wuv swapped (keys from Wuv, values from Wuk)": lambda: _row(x, C, swapped, n_heads),
        "it matches every head using head 0's columns of Wuk and Wuv": lambda: _row(
            x, C, p, n_heads, heads=lambda h, d: slice(0, d)) if n_heads > 1 else None,
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


def _step_arrays(x, cache, p, n_heads):
    """The reference's (out, new cache) of one step."""
    out, C = step(x, cache, p, n_heads)
    return out, {"c": C}


def _empty_cache(p):
    return {"c": np.zeros((0, p["Wdkv"].shape[1]))}


STEP = DecodeStep(FN, ("c",), _step_arrays, causal_rows, _empty_cache, _diagnose)


def _first_output(ex, args, results):
    output(ex, args, results, "the output of the first step (each head's value of the new token)")


def _latents_only(ex, args, results):
    """The new cache holds the latents and nothing else: the old rows, then x_t Wdkv."""
    _, C = step(*args)
    _, new = unpack(ex, results[0].value)
    if set(new) != {"c"}:
        extra = sorted(str(k) for k in set(new) - {"c"})
        raise Fail(f"the new cache should hold only 'c', the latents; it also holds {', '.join(extra)}: "
                   "a latent cache keeps no keys or values (they are rebuilt, or absorbed)")
    arr = new["c"]
    if not isinstance(arr, np.ndarray):
        raise Fail(f"new_cache['c'] is {describe(arr)}; expected an array")
    if arr.shape != C.shape:
        raise Fail(f"new_cache['c'] has shape {arr.shape}; after one step from a cache of {C.shape[0] - 1} "
                   f"rows it should have shape (t + 1, r) = {C.shape}")
    check_array(arr[:-1], C[:-1], "the old rows of new_cache['c']")
    check_array(arr[-1], C[-1], "the last row of new_cache['c'] (the new latent, x_t Wdkv)")


def _out_shape(ex, args, results):
    """out is a float64 vector of H d numbers."""
    out, _ = unpack(ex, results[0].value)
    width = args[2]["Wq"].shape[1]
    if not isinstance(out, np.ndarray):
        raise Fail(f"out is {describe(out)}; expected a numpy array of shape (H d,) = ({width},)")
    if out.shape != (width,):
        raise Fail(f"out has shape {out.shape}; expected (H d,) = ({width},): the heads' outputs side by "
                   "side in one vector")
    if out.dtype != np.float64:
        raise Fail(f"out has dtype {out.dtype}; expected float64 for float64 inputs")


# ------------------------------------------------------------------------------ the inputs


def _random_params(rng, D, H, d, r, scale=1.0):
    return {"Wq": rng.standard_normal((D, H * d)) * scale, "Wdkv": rng.standard_normal((D, r)) * scale,
            "Wuk": rng.standard_normal((r, H * d)) * scale, "Wuv": rng.standard_normal((r, H * d))}


def _one_step(seed, D, H, d, r, t, scale=1.0):
    """(x_t, cache of t latents, p, H), drawn in that order from a generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    x, p = rng.standard_normal(D), _random_params(rng, D, H, d, r, scale)
    C = rng.standard_normal((t, r)) if t else np.zeros((0, r))
    return x, {"c": C}, p, H


def _runs(seed, *sizes):
    """Decoding runs (X, p, H), one per (T tokens, D, H, d, r), drawn in turn from one generator."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((T, D)), _random_params(rng, D, H, d, r), H) for T, D, H, d, r in sizes]


def _large_scores_run(seed):
    """Five tokens whose scores are about 10^4: without subtracting the maximum, exp overflows."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((5, 4)) * 30.0
    p = _random_params(rng, 4, 2, 3, 3)
    p["Wq"] *= 10.0
    p["Wuk"] *= 10.0
    return [(X, p, 2)]


# The statement's worked example: D = 2, r = 1, two heads of d = 1; c = x1 + x2, q = x,
# head 0's key c and value c, head 1's key -c and value 2c.
WORKED_EXAMPLE = [(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]]),
                   {"Wq": np.eye(2), "Wdkv": np.array([[1.0], [1.0]]),
                    "Wuk": np.array([[1.0, -1.0]]), "Wuv": np.array([[1.0, 2.0]])}, 2)]


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    return [
        decoding(STEP, "the worked example of the statement, three tokens one by one", 2, WORKED_EXAMPLE),
        one_call(STEP, "the first step, from an empty cache (t = 0): each head's output is its value of the new "
                 "token", 1, _one_step(2901, D=5, H=3, d=2, r=4, t=0), _first_output),
        one_call(STEP, "one step from a cache of 5 latents (D = 6, H = 2, d = 3, r = 4)", 1,
                 _one_step(2902, D=6, H=2, d=3, r=4, t=5), output),
        one_call(STEP, "the new cache holds only the latents: the old rows, then x_t Wdkv", 2,
                 _one_step(2903, D=5, H=2, d=3, r=3, t=4), _latents_only),
        also_right(STEP, "the input cache dict is left as it was (same key, same array)", 1,
                   _one_step(2904, D=4, H=2, d=2, r=3, t=3), dict_unchanged, capture_args=True),
        also_right(STEP, "the input cache array (and x_t, p) are not modified in place", 1,
                   _one_step(2905, D=3, H=3, d=2, r=2, t=6), arrays_unchanged, capture_args=True),
        decoding(STEP, "decoding 9 tokens one by one gives the rows of full causal multi-head attention "
                 "(D = 7, H = 3, d = 4, r = 5)", 3, _runs(2906, (9, 7, 3, 4, 5))),
        decoding(STEP, "one head (H = 1; 6 tokens, D = 4, d = 3, r = 2)", 1, _runs(2907, (6, 4, 1, 3, 2))),
        decoding(STEP, "a latent of one number (r = 1; 6 tokens, D = 3, H = 2, d = 2)", 1,
                 _runs(2908, (6, 3, 2, 2, 1))),
        decoding(STEP, "large scores (about 10^4): the softmax must be stable", 1, _large_scores_run(2909)),
        also_right(STEP, "out has shape (H d,) and dtype float64", 1, _one_step(2910, D=5, H=3, d=2, r=4, t=2),
                   _out_shape),
        one_call(STEP, "one step from a long cache (t = 300, D = 16, H = 4, d = 8, r = 12)", 1,
                 _one_step(2911, D=16, H=4, d=8, r=12, t=300, scale=0.25), output),
        decoding(STEP, "six random decoding runs of non-round sizes (H from 1 to 5, r from 1 to 9, r above and "
                 "below H d)", 3,
                 _runs(2912, (4, 3, 2, 2, 5), (6, 5, 3, 1, 2), (11, 8, 5, 3, 9), (3, 2, 1, 5, 1),
                       (7, 11, 4, 2, 7), (13, 4, 2, 4, 3))),
    ]


EXERCISE = Exercise(name="latent_attend_step", make_tests=make_tests)
