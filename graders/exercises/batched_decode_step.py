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

import math

import numpy as np

from ..checks import Fail, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test

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


def _values_test(name, points, cases, *, rtol=1e-9, atol=1e-12):
    expected = [reference(*c) for c in cases]

    def check(results):
        for k, (case, exp) in enumerate(zip(cases, expected)):
            what = (f"case {k + 1} of {len(cases)} ({_label(case)}): the output" if len(cases) > 1
                    else f"the output ({_label(case)})")
            check_array(results[k].value, exp, what, rtol=rtol, atol=atol,
                        hint=lambda a, c=case: _diagnose(*c, a))
    return Test(name, points, [Call(FN, c) for c in cases], check, step="case")


def _nan(rng, shape):
    return np.full(shape, np.nan)


def _infinities(rng, shape):
    return rng.choice([np.inf, -np.inf, 1e300, -1e300], size=shape)


def _stale(rng, shape):
    return rng.standard_normal(shape) * 1e3       # old rows of a sequence that was longer


# ---------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    tests = []

    # A case to work by hand: one key/value head, two query heads, lengths 1 and 3.
    q = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 2.0]]])
    K = np.array([[[[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]], [[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]])
    V = np.array([[[[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]], [[[1.0, 0.0], [0.0, 2.0], [1.0, 2.0]]]])
    tests.append(_values_test("a small case (B = 2, H = 2, G = 1, d = 2, lengths 1 and 3)", 1,
                              [(q, K, V, np.array([1, 3]))]))

    rng = np.random.default_rng(5101)
    tests.append(_values_test("grouped heads: 8 query heads over 2 key/value heads (B = 3)", 2,
                              [_case(rng, 3, 8, 2, 10, 4), _case(rng, 2, 6, 3, 7, 5)]))
    rng = np.random.default_rng(5102)
    tests.append(_values_test("plain multi-head attention, H = G (B = 4)", 1,
                              [_case(rng, 4, 3, 3, 9, 4), _case(rng, 2, 1, 1, 5, 3)]))
    rng = np.random.default_rng(5103)
    tests.append(_values_test("one key/value head for every query head, G = 1 (B = 3, H = 6)", 1,
                              [_case(rng, 3, 6, 1, 8, 4)]))
    rng = np.random.default_rng(5104)
    tests.append(_values_test("lengths of 1: each sequence attends to its first position only", 1,
                              [_case(rng, 4, 4, 2, 6, 3, lengths=[1, 1, 1, 1]),
                               _case(rng, 2, 2, 1, 1, 5, lengths=[1, 1])]))
    rng = np.random.default_rng(5105)
    tests.append(_values_test("lengths equal to L_max: the whole buffer is valid", 1,
                              [_case(rng, 3, 4, 2, 7, 3, lengths=[7, 7, 7]),
                               _case(rng, 3, 4, 4, 5, 2, lengths=[5, 1, 5])]))
    rng = np.random.default_rng(5106)
    tests.append(_values_test("NaN beyond each length changes nothing", 2,
                              [_case(rng, 4, 4, 2, 9, 4, lengths=[3, 9, 1, 6], tail=_nan),
                               _case(rng, 2, 2, 2, 6, 3, lengths=[2, 5], tail=_nan)]))
    rng = np.random.default_rng(5107)
    tests.append(_values_test("infinities and huge values beyond each length change nothing", 1,
                              [_case(rng, 3, 6, 3, 8, 4, lengths=[2, 8, 5], tail=_infinities),
                               _case(rng, 3, 2, 1, 8, 4, lengths=[4, 1, 7], tail=_stale)]))
    rng = np.random.default_rng(5108)
    tests.append(_values_test("large scores (about 1e4): the softmax must be stable", 1,
                              [_case(rng, 3, 4, 2, 6, 4, scale=50.0), _case(rng, 2, 2, 1, 5, 2, scale=-70.0)]))
    rng = np.random.default_rng(5109)
    tests.append(_values_test("head width d = 1", 1, [_case(rng, 3, 4, 2, 5, 1), _case(rng, 2, 3, 1, 4, 1)]))

    # float32 in, float32 out, as accurate as float32 allows
    rng = np.random.default_rng(5110)
    f32 = [_case(rng, 3, 8, 2, 16, 8, dtype=np.float32), _case(rng, 2, 4, 4, 9, 6, dtype=np.float32)]
    f32_expected = [reference(*c) for c in f32]

    def float32(results):
        for k, (case, exp) in enumerate(zip(f32, f32_expected)):
            value = results[k].value
            what = f"case {k + 1} of {len(f32)} ({_label(case)}, float32)"
            if isinstance(value, np.ndarray) and value.dtype != np.float32:
                raise Fail(f"{what}: the output has dtype {value.dtype}; for float32 inputs it should be "
                           "float32 (a cache in float32 is read in float32)")
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                value = value.astype(np.float64)       # float32 is right here: no advice to use float64
            check_array(value, exp, f"{what}: the output", rtol=1e-4, atol=1e-5,
                        hint=lambda a, c=case: _diagnose(*c, a, tol=1e-4))
    tests.append(Test("float32 inputs give a float32 output, accurate to float32", 1,
                      [Call(FN, c) for c in f32], float32, step="case"))

    rng = np.random.default_rng(5111)
    shaped = _case(rng, 3, 6, 2, 7, 5)

    def shape_dtype(results):
        value = results[0].value
        if not isinstance(value, np.ndarray):
            raise Fail(f"the output is {describe(value)}; expected a numpy array of shape (B, H, d) = (3, 6, 5)")
        if value.shape != (3, 6, 5):
            raise Fail(f"the output has shape {value.shape}; expected (B, H, d) = (3, 6, 5)")
        if value.dtype != np.float64:
            raise Fail(f"the output has dtype {value.dtype}; expected float64 for float64 inputs")
    tests.append(Test("the output has shape (B, H, d) and q's dtype (float64 here)", 1,
                      [Call(FN, shaped)], with_right_answer(shape_dtype, _values_test("", 0, [shaped]).check)))

    rng = np.random.default_rng(5112)
    kept = _case(rng, 3, 4, 2, 6, 3, lengths=[2, 6, 4], tail=_nan)

    def not_modified(results, case=kept):
        after = results[0].originals_after
        for name, before, now in zip(("q", "K", "V", "lengths"), case, after):
            unchanged(before, now, name)
    tests.append(Test("q, K, V and lengths are not modified", 1, [Call(FN, kept, capture_args=True)],
                      with_right_answer(not_modified, _values_test("", 0, [kept]).check)))

    rng = np.random.default_rng(5113)
    as_int32 = _case(rng, 3, 4, 2, 6, 3)
    as_int32 = as_int32[:3] + (as_int32[3].astype(np.int32),)
    tests.append(_values_test("lengths given as an int32 array", 1, [as_int32]))

    rng = np.random.default_rng(5114)
    cases = []
    for _ in range(20):
        G = int(rng.integers(1, 4))
        H = G * int(rng.integers(1, 4))
        cases.append(_case(rng, int(rng.integers(1, 6)), H, G, int(rng.integers(1, 13)), int(rng.integers(1, 7)),
                           scale=float(rng.choice([0.5, 1.0, 3.0])),
                           tail=[None, _nan, _stale][int(rng.integers(0, 3))]))
    tests.append(_values_test("20 random cases (B up to 5, H up to 9, L_max up to 12, d up to 6)", 2, cases))
    return tests


EXERCISE = Exercise(name="batched_decode_step", make_tests=make_tests)
