"""Hidden tests of ``batched_decode_step(q, K, V, lengths)`` (chapter 5).

One decode step for B sequences of different lengths with grouped-query attention::

    q        (B, H, d)        each sequence's newest query, one per query head
    K, V     (B, G, L_max, d) the cache buffers; row b is valid up to lengths[b]
    lengths  (B,)             1 <= lengths[b] <= L_max
    ->       (B, H, d)        out[b, h] = softmax(K[b, g, :n] q[b, h] / sqrt(d)) V[b, g, :n],
                              g = h // (H / G), n = lengths[b]

Whatever lies beyond a length (zeros, stale rows, NaN, infinities) changes nothing; the inputs are
not modified; the result has q's dtype.  The reference works one (sequence, head) pair at a time,
in float64, over the valid slice only (so nothing beyond a length is ever read), with a softmax
through the log-sum-exp: no code shared with a vectorised, masked answer.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..checks import Fail, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test, case

FN = "batched_decode_step"


# ------------------------------------------------------------------------------- reference


def _weights(scores: np.ndarray) -> np.ndarray:
    m = float(np.max(scores))
    log_total = m + math.log(float(np.sum(np.exp(scores - m))))
    return np.exp(scores - log_total)


def reference(q, K, V, lengths, *, kv_head=None, scale=None, extra=0, ignore_lengths=False) -> np.ndarray:
    """out[b, h] over the first lengths[b] positions of kv head ``kv_head(h, H, G)`` (h // (H/G)).
    The keywords make the common mistakes, for the feedback."""
    q, K, V = (np.asarray(a, dtype=np.float64) for a in (q, K, V))
    B, H, d = q.shape
    G, L = K.shape[1], K.shape[2]
    scale = math.sqrt(d) if scale is None else scale
    pick = kv_head or (lambda h, H, G: h // (H // G))
    out = np.zeros((B, H, d))
    for b in range(B):
        n = L if ignore_lengths else min(L, max(1, int(lengths[b]) + extra))
        for h in range(H):
            g = pick(h, H, G)
            keys, values = K[b, g, :n], V[b, g, :n]
            scores = np.array([float(np.dot(key, q[b, h])) for key in keys]) / scale
            out[b, h] = _weights(scores) @ values
    return out


# ---------------------------------------------------------------------------- diagnosis


MISTAKES = {
    "it matches attending to all L_max positions: each sequence must stop at its own length":
        {"ignore_lengths": True},
    "it matches query head h reading key/value head h % G: the H / G query heads of a group are "
    "consecutive, so head h reads head h // (H / G)": {"kv_head": lambda h, H, G: h % G},
    "it matches scores that are not divided by sqrt(d)": {"scale": 1.0},
    "it matches attending to one position too few (positions 0 .. lengths[b] - 1 are valid)": {"extra": -1},
    "it matches attending to one position too many (position lengths[b] is not valid yet)": {"extra": 1},
}


def _diagnose(q, K, V, lengths, actual, tol: float = 1e-6) -> str | None:
    with np.errstate(all="ignore"):
        return _diagnosis(q, K, V, lengths, actual, tol)


def _diagnosis(q, K, V, lengths, actual, tol) -> str | None:
    if not np.all(np.isfinite(actual)):
        tail = bool(np.any(~np.isfinite(np.asarray(K, dtype=np.float64)))
                    or np.any(~np.isfinite(np.asarray(V, dtype=np.float64))))
        if tail:
            return ("NaN or infinity came out, and this case holds NaN or infinities beyond the lengths: "
                    "a weight of 0 times NaN is still NaN, so the positions beyond a length must not take part "
                    "at all (take the valid slice, or replace them before the products)")
        return "exp overflowed or 0/0 happened: subtract each row's largest score before exp"
    for text, options in MISTAKES.items():
        if options.get("kv_head") and K.shape[1] in (1, q.shape[1]):
            continue                       # with G = 1 or G = H both readings agree
        try:
            guess = reference(q, K, V, lengths, **options)
        except Exception:  # noqa: BLE001 - a variant that does not apply here
            continue
        if guess.shape == actual.shape and np.allclose(actual, guess, rtol=tol, atol=tol * 1e-3):
            return text
    return None


# ------------------------------------------------------------------------------ the cases


def _case(rng, B, H, G, L, d, lengths=None, scale=1.0, dtype=np.float64, tail=None):
    """(q, K, V, lengths) with random values; ``tail`` fills what lies beyond each length."""
    q = rng.standard_normal((B, H, d)) * scale
    K = rng.standard_normal((B, G, L, d)) * scale
    V = rng.standard_normal((B, G, L, d))
    if lengths is None:
        lengths = rng.integers(1, L + 1, size=B)
    lengths = np.asarray(lengths, dtype=np.int64)
    if tail is not None:
        for b, n in enumerate(lengths):
            K[b, :, n:] = tail(rng, K[b, :, n:].shape)
            V[b, :, n:] = tail(rng, V[b, :, n:].shape)
    return q.astype(dtype), K.astype(dtype), V.astype(dtype), lengths


def _label(case) -> str:
    q, K, _, lengths = case
    B, H, d = q.shape
    return f"B = {B}, H = {H}, G = {K.shape[1]}, L_max = {K.shape[2]}, d = {d}"


def _check_values(cases, expected, rtol, atol, results):
    """Each case's output is the reference's."""
    for k, (one, exp) in enumerate(zip(cases, expected)):
        what = (f"case {k + 1} of {len(cases)} ({_label(one)}): the output" if len(cases) > 1
                else f"the output ({_label(one)})")
        check_array(results[k].value, exp, what, rtol=rtol, atol=atol, hint=functools.partial(_diagnose, *one))


def _check_float32(cases, expected, results):
    """float32 in, float32 out, as accurate as float32 allows."""
    for k, (one, exp) in enumerate(zip(cases, expected)):
        value = results[k].value
        what = f"case {k + 1} of {len(cases)} ({_label(one)}, float32)"
        if isinstance(value, np.ndarray) and value.dtype != np.float32:
            raise Fail(f"{what}: the output has dtype {value.dtype}; for float32 inputs it should be "
                       "float32 (a cache in float32 is read in float32)")
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            value = value.astype(np.float64)       # float32 is right here: no advice to use float64
        check_array(value, exp, f"{what}: the output", rtol=1e-4, atol=1e-5,
                    hint=functools.partial(_diagnose, *one, tol=1e-4))


def _shape_dtype(args, results):
    value = results[0].value
    if not isinstance(value, np.ndarray):
        raise Fail(f"the output is {describe(value)}; expected a numpy array of shape (B, H, d) = (3, 6, 5)")
    if value.shape != (3, 6, 5):
        raise Fail(f"the output has shape {value.shape}; expected (B, H, d) = (3, 6, 5)")
    if value.dtype != np.float64:
        raise Fail(f"the output has dtype {value.dtype}; expected float64 for float64 inputs")


def _not_modified(args, results):
    after = results[0].originals_after
    for name, before, now in zip(("q", "K", "V", "lengths"), args, after):
        unchanged(before, now, name)


def _with_right_answer(prop, args, results):
    """``prop`` counting only together with the right answer on the same call."""
    right = functools.partial(_check_values, [args], [reference(*args)], 1e-9, 1e-12)
    return with_right_answer(functools.partial(prop, args), right)(results)


def values_test(name, points, cases, *, rtol=1e-9, atol=1e-12) -> Test:
    return case(name, points, [Call(FN, c) for c in cases], _check_values, cases, [reference(*c) for c in cases],
                rtol, atol, step="case")


def float32_test(name, points, cases) -> Test:
    return case(name, points, [Call(FN, c) for c in cases], _check_float32, cases, [reference(*c) for c in cases],
                step="case")


def property_test(name, points, args, prop, capture_args=False) -> Test:
    """A property of one call, counting only together with the right answer."""
    return case(name, points, [Call(FN, args, capture_args)], _with_right_answer, prop, args)


def _nan(rng, shape):
    return np.full(shape, np.nan)


def _infinities(rng, shape):
    return rng.choice([np.inf, -np.inf, 1e300, -1e300], size=shape)


def _stale(rng, shape):
    return rng.standard_normal(shape) * 1e3       # old rows of a sequence that was longer


def _cases(seed, *shapes, **options):
    """One case per (B, H, G, L_max, d[, a dict of options]), drawn in turn from a generator
    seeded with ``seed``; ``options`` (lengths, scale, dtype, tail) apply to every case."""
    rng = np.random.default_rng(seed)
    return [_case(rng, *shape[:5], **{**options, **(shape[5] if len(shape) > 5 else {})}) for shape in shapes]


def _int32_lengths(cases):
    return [(q, K, V, lengths.astype(np.int32)) for q, K, V, lengths in cases]


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        G = int(rng.integers(1, 4))
        H = G * int(rng.integers(1, 4))
        cases.append(_case(rng, int(rng.integers(1, 6)), H, G, int(rng.integers(1, 13)), int(rng.integers(1, 7)),
                           scale=float(rng.choice([0.5, 1.0, 3.0])),
                           tail=[None, _nan, _stale][int(rng.integers(0, 3))]))
    return cases


# A case to work by hand: one key/value head, two query heads, lengths 1 and 3.
BY_HAND = (np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 2.0]]]),
           np.array([[[[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]], [[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]]),
           np.array([[[[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]], [[[1.0, 0.0], [0.0, 2.0], [1.0, 2.0]]]]),
           np.array([1, 3]))


# ---------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    return [
        values_test("a small case (B = 2, H = 2, G = 1, d = 2, lengths 1 and 3)", 1, [BY_HAND]),
        values_test("grouped heads: 8 query heads over 2 key/value heads (B = 3)", 2,
                    _cases(5101, (3, 8, 2, 10, 4), (2, 6, 3, 7, 5))),
        values_test("plain multi-head attention, H = G (B = 4)", 1, _cases(5102, (4, 3, 3, 9, 4), (2, 1, 1, 5, 3))),
        values_test("one key/value head for every query head, G = 1 (B = 3, H = 6)", 1, _cases(5103, (3, 6, 1, 8, 4))),
        values_test("lengths of 1: each sequence attends to its first position only", 1,
                    _cases(5104, (4, 4, 2, 6, 3, {"lengths": [1, 1, 1, 1]}), (2, 2, 1, 1, 5, {"lengths": [1, 1]}))),
        values_test("lengths equal to L_max: the whole buffer is valid", 1,
                    _cases(5105, (3, 4, 2, 7, 3, {"lengths": [7, 7, 7]}), (3, 4, 4, 5, 2, {"lengths": [5, 1, 5]}))),
        values_test("NaN beyond each length changes nothing", 2,
                    _cases(5106, (4, 4, 2, 9, 4, {"lengths": [3, 9, 1, 6]}), (2, 2, 2, 6, 3, {"lengths": [2, 5]}),
                           tail=_nan)),
        values_test("infinities and huge values beyond each length change nothing", 1,
                    _cases(5107, (3, 6, 3, 8, 4, {"lengths": [2, 8, 5], "tail": _infinities}),
                           (3, 2, 1, 8, 4, {"lengths": [4, 1, 7], "tail": _stale}))),
        values_test("large scores (about 1e4): the softmax must be stable", 1,
                    _cases(5108, (3, 4, 2, 6, 4, {"scale": 50.0}), (2, 2, 1, 5, 2, {"scale": -70.0}))),
        values_test("head width d = 1", 1, _cases(5109, (3, 4, 2, 5, 1), (2, 3, 1, 4, 1))),
        float32_test("float32 inputs give a float32 output, accurate to float32", 1,
                     _cases(5110, (3, 8, 2, 16, 8), (2, 4, 4, 9, 6), dtype=np.float32)),
        property_test("the output has shape (B, H, d) and q's dtype (float64 here)", 1,
                      *_cases(5111, (3, 6, 2, 7, 5)), _shape_dtype),
        property_test("q, K, V and lengths are not modified", 1,
                      *_cases(5112, (3, 4, 2, 6, 3), lengths=[2, 6, 4], tail=_nan), _not_modified, capture_args=True),
        values_test("lengths given as an int32 array", 1, _int32_lengths(_cases(5113, (3, 4, 2, 6, 3)))),
        values_test("20 random cases (B up to 5, H up to 9, L_max up to 12, d up to 6)", 2, _random_cases(5114, 20)),
    ]


EXERCISE = Exercise(name="batched_decode_step", make_tests=make_tests)
