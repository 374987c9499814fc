"""Hidden tests of ``quantize_kv(x, bits, axis)`` and ``dequantize_kv(codes, scale, offset)``
(chapter 13).

Asymmetric uniform quantization of x (T, d) to ``bits`` bits (1 to 8), one scale and offset per
slice: ``axis=0`` takes each channel's statistics over the T tokens (scale and offset of shape
(1, d), how keys are quantized), ``axis=1`` each token's over its d channels ((T, 1), values)::

    offset = min,   scale = (max - min) / (2**bits - 1),
    codes  = clip(np.round((x - offset) / scale), 0, 2**bits - 1)  as uint8

A constant slice gets scale 0 and codes 0 (and dequantizes exactly); ``dequantize_kv`` returns
codes * scale + offset; the input is left as it was.

The reference walks each slice with Python floats, one number at a time (the same IEEE
operations as numpy's, in the order the statement gives, and Python's round, which rounds halves
to even as np.round does); it shares no code with the course's engine or its solution.  Random
cases keep every (x - offset) / scale at least 1e-6 from a half, so that the ways of writing the
same division all give the same codes; ties are tested on exact binary fractions only.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..checks import Fail, as_array, check_close, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Ref, Test, case

QUANT, DEQUANT = "quantize_kv", "dequantize_kv"
AWAY_FROM_HALF = 1e-6


# ------------------------------------------------------------------------------- reference


def _slice_codes(values: list[float], bits: int, how: str = "round"):
    """Codes, scale and offset of one slice (a list of floats), by the statement's formula.
    ``how`` names a mistake for the diagnosis: "floor", "half_up" or "levels" (2**bits steps)."""
    low, high = min(values), max(values)
    top = 2 ** bits - 1
    scale = (high - low) / (top + 1 if how == "levels" else top)
    if scale == 0:
        return [0] * len(values), 0.0, low
    codes = []
    for v in values:
        q = (v - low) / scale
        r = math.floor(q) if how == "floor" else math.floor(q + 0.5) if how == "half_up" else round(q)
        codes.append(max(0, min(top, r)))
    return codes, scale, low


def quantize(x: np.ndarray, bits: int, axis: int, how: str = "round"):
    """The expected (codes (T, d) int, scale, offset) of ``quantize_kv(x, bits, axis)``, with
    scale and offset of shape (1, d) for axis 0 and (T, 1) for axis 1."""
    rows = [[float(v) for v in row] for row in np.asarray(x)]
    T, d = len(rows), len(rows[0])
    codes = [[0] * d for _ in range(T)]
    if axis == 0:
        scale, offset = [[0.0] * d], [[0.0] * d]
        for j in range(d):
            c, s, o = _slice_codes([rows[t][j] for t in range(T)], bits, how)
            for t in range(T):
                codes[t][j] = c[t]
            scale[0][j], offset[0][j] = s, o
    else:
        scale, offset = [[0.0] for _ in range(T)], [[0.0] for _ in range(T)]
        for t in range(T):
            codes[t], scale[t][0], offset[t][0] = _slice_codes(rows[t], bits, how)
    return np.array(codes, dtype=np.int64), np.array(scale), np.array(offset)


def dequantize(codes, scale, offset) -> np.ndarray:
    """codes * scale + offset, entry by entry, broadcasting scale and offset (1, d) or (T, 1)."""
    T, d = np.shape(codes)
    s, o = np.asarray(scale, dtype=np.float64), np.asarray(offset, dtype=np.float64)
    out = np.zeros((T, d))
    for t in range(T):
        for j in range(d):
            st, sj = (0 if s.shape[0] == 1 else t), (0 if s.shape[1] == 1 else j)
            out[t, j] = float(codes[t][j]) * float(s[st, sj]) + float(o[st, sj])
    return out


def distance_from_halves(x, bits, axis) -> float:
    """The smallest distance of any (x - offset) / scale from a half (inf when none is near)."""
    _, scale, offset = quantize(x, bits, axis)
    safe = np.where(scale > 0, scale, np.nan)
    ratio = (np.asarray(x, dtype=np.float64) - offset) / safe
    frac = np.abs(ratio - np.floor(ratio) - 0.5)
    return float(np.nanmin(frac, initial=np.inf))


# ---------------------------------------------------------------------------- diagnosis

SWAPPED = ("it matches the statistics taken over the other axis: axis=0 gives one scale per channel (statistics "
           "over the tokens, down each column), axis=1 one per token (across each row)")

MISTAKES = {
    "it matches codes rounded down (floor); round to the nearest with np.round": {"how": "floor"},
    "it matches halves rounded up (floor(v + 0.5)); np.round rounds a half to the even code": {"how": "half_up"},
    "it matches a step of (max - min) / 2**bits; the codes 0 .. 2**bits - 1 have 2**bits - 1 steps between "
    "them: divide by 2**bits - 1": {"how": "levels"},
    SWAPPED: {"swap": True},
}


def _diagnose(x, bits, axis, codes) -> str | None:
    for text, mistake in MISTAKES.items():
        if mistake.get("swap"):
            guess = quantize(x, bits, 1 - axis)[0]
        else:
            guess = quantize(x, bits, axis, **mistake)[0]
        if guess.shape == codes.shape and np.array_equal(guess, codes):
            return text
    return None


# ------------------------------------------------------------------------------ checking


def _triple(value, what=QUANT):
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        raise Fail(f"{what} should return three arrays (codes, scale, offset); it returned {describe(value)}")
    return value


def _codes_array(codes, shape, bits) -> np.ndarray:
    if not isinstance(codes, np.ndarray):
        raise Fail(f"codes is {describe(codes)}; expected a numpy array of dtype uint8")
    if codes.dtype != np.uint8:
        raise Fail(f"codes has dtype {codes.dtype}; expected uint8 (use .astype(np.uint8) after clipping)")
    if codes.shape != tuple(shape):
        raise Fail(f"codes has shape {codes.shape}; expected the input's shape {tuple(shape)}")
    if bits and int(codes.max(initial=0)) > 2 ** bits - 1:
        raise Fail(f"a code is {int(codes.max())}, above 2**bits - 1 = {2 ** bits - 1}: clip the codes")
    return codes.astype(np.int64)


def _stat(value, name, shape, other=None) -> np.ndarray:
    """scale or offset: a float array of exactly ``shape`` (the reduced axis kept, length 1);
    ``other``, the shape the other axis gives, is named as the mistake when it is the one."""
    if not isinstance(value, np.ndarray):
        raise Fail(f"{name} is {describe(value)}; expected a numpy array of shape {shape}")
    if value.dtype.kind != "f":
        raise Fail(f"{name} has dtype {value.dtype}; expected a float array")
    if value.shape != tuple(shape):
        more = " (keep the reduced axis: keepdims=True)" if value.size == math.prod(shape) else ""
        if other is not None and value.shape == tuple(other) and tuple(other) != tuple(shape):
            more = f"; {SWAPPED}"
        raise Fail(f"{name} has shape {value.shape}; expected {tuple(shape)}{more}")
    if not np.all(np.isfinite(value)):
        raise Fail(f"{name} contains NaN or infinity; a constant slice has scale 0 (and offset its value)")
    return value.astype(np.float64)


def _check_quantized(x, bits, axis, value, what=QUANT):
    """The codes, scale and offset of one call are the reference's: codes exactly, scale and
    offset to 1e-12 relative."""
    codes, scale, offset = _triple(value, what)
    want_codes, want_scale, want_offset = quantize(x, bits, axis)
    stat_shape = want_scale.shape
    other = (x.shape[0], 1) if axis == 0 else (1, x.shape[1])
    got = _codes_array(codes, want_codes.shape, bits)
    s = _stat(scale, "scale", stat_shape, other)
    o = _stat(offset, "offset", stat_shape, other)
    if not np.array_equal(got, want_codes):
        bad = int((got != want_codes).sum())
        hint = _diagnose(x, bits, axis, got)
        raise Fail(f"{what}: {bad} of {got.size} codes differ (bits={bits}, axis={axis})"
                   + (f"; {hint}" if hint else ""))
    if np.any((want_scale == 0) & (s != 0)):
        raise Fail(f"{what}: a constant slice (max = min) has a scale other than 0; the statement gives it "
                   "scale 0 and codes 0, so that it decodes exactly to its offset")
    check_close(s, want_scale, f"{what}: scale (bits={bits}, axis={axis})", rtol=1e-12, atol=1e-300)
    check_close(o, want_offset, f"{what}: offset (bits={bits}, axis={axis})", rtol=1e-12, atol=1e-300)


def _quantized(cases, results):
    """Each (x, bits, axis) call returns the reference's codes, scale and offset."""
    for number, ((x, bits, axis), result) in enumerate(zip(cases, results), start=1):
        where = f"case {number} of {len(cases)}" if len(cases) > 1 else QUANT
        _check_quantized(x, bits, axis, result.value, where)


def _shapes_and_dtypes(cases, results):
    """codes uint8 of x's shape; scale and offset float, (1, d) for axis 0 and (T, 1) for axis 1."""
    for (x, bits, axis), result in zip(cases, results):
        codes, scale, offset = _triple(result.value)
        T, d = x.shape
        shape = (1, d) if axis == 0 else (T, 1)
        _codes_array(codes, (T, d), bits)
        other = (T, 1) if axis == 0 else (1, d)
        _stat(scale, f"scale (axis={axis})", shape, other)
        _stat(offset, f"offset (axis={axis})", shape, other)


def _shapes_with_right_answer(cases, results):
    """The shapes and dtypes count only together with the right codes, scales and offsets: zeros of
    the right shapes earn nothing."""
    return with_right_answer(functools.partial(_shapes_and_dtypes, cases), functools.partial(_quantized, cases))(results)


def _round_trip(cases, results):
    """Calls alternate: quantize_kv(x, bits, axis), then dequantize_kv of what it returned.  Every
    decoded number is within half a step of x (scale / 2 of its own slice), and finite."""
    for number, (x, bits, axis) in enumerate(cases):
        quantized, decoded = results[2 * number].value, results[2 * number + 1].value
        _check_quantized(x, bits, axis, quantized, f"case {number + 1} of {len(cases)}")
        _, want_scale, _ = quantize(x, bits, axis)
        back = as_array(decoded, f"{DEQUANT}'s result (case {number + 1})", x.shape, strict_shape=True)
        if not np.all(np.isfinite(back)):
            raise Fail(f"{DEQUANT}'s result (case {number + 1}) contains NaN or infinity")
        err = np.abs(back - x)
        bound = np.broadcast_to(want_scale / 2, x.shape) * (1 + 1e-9) + 1e-12 * np.abs(x).max(initial=1.0)
        if np.any(err > bound):
            worst = float(np.max(err / np.maximum(np.broadcast_to(want_scale, x.shape), 1e-300)))
            raise Fail(f"case {number + 1}: a decoded number is {worst:.2f} steps from x; the bound is half "
                       "a step (scale / 2)")


def _dequantized(cases, results):
    """dequantize_kv(codes, scale, offset) is codes * scale + offset, broadcast."""
    for number, ((codes, scale, offset), result) in enumerate(zip(cases, results), start=1):
        want = dequantize(codes, scale, offset)
        got = as_array(result.value, f"{DEQUANT}'s result (case {number})", want.shape, strict_shape=True)
        if result.value.dtype.kind != "f":
            raise Fail(f"{DEQUANT}'s result has dtype {result.value.dtype}; expected floats")
        check_close(got, want, f"{DEQUANT}'s result (case {number})", rtol=1e-12, atol=1e-300)


def _inputs_untouched(args, results):
    unchanged(args[0], results[0].args_after[0], "x")


def _with_right_answer(prop, args, results):
    return with_right_answer(functools.partial(prop, args),
                             functools.partial(_quantized, [args]))(results)


# ------------------------------------------------------------------------------ the inputs

# The statement's worked example: 3 tokens, 4 channels, channel 2 an outlier, channel 3 constant.
WORKED_EXAMPLE = np.array([[0.0, -0.5, 8.0, 1.0],
                           [1.0, 0.5, 2.0, 1.0],
                           [-0.5, 1.0, 6.0, 1.0]])
# Halves on exact binary fractions: (x - min) / scale = 0.5, 1.5, 2.5 exactly; np.round gives 0, 2, 2.
HALVES = np.array([[0.0], [0.5], [1.5], [2.5], [3.0]])


def random_x(rng, T, d, bits, axis, spread=1.0, outliers=False, tries=200):
    """A (T, d) float64 input away from every half (at bits, axis), with a few outlier channels."""
    for _ in range(tries):
        x = rng.standard_normal((T, d)) * spread
        if outliers and d > 2:
            x[:, rng.choice(d, 2, replace=False)] *= 20.0
        if distance_from_halves(x, bits, axis) > AWAY_FROM_HALF:
            return x
    raise RuntimeError("no input away from the halves")


def _quantize_calls(cases, capture=False):
    return [Call(QUANT, (x, bits, axis), capture) for x, bits, axis in cases]


def quantized(name, points, cases, **options) -> Test:
    return case(name, points, _quantize_calls(cases), _quantized, cases, **options)


def round_trip(name, points, cases) -> Test:
    calls = []
    for n, (x, bits, axis) in enumerate(cases):
        calls += [Call(QUANT, (x, bits, axis)), Call(DEQUANT, (Ref(2 * n, (0,)), Ref(2 * n, (1,)), Ref(2 * n, (2,))))]
    return case(name, points, calls, _round_trip, cases)


def _random_cases(seed, specs, **kwargs):
    rng = np.random.default_rng(seed)
    return [(random_x(rng, T, d, bits, axis, **kwargs), bits, axis) for T, d, bits, axis in specs]


def _constant_cases():
    column = np.array([[1.0, 3.25], [2.0, 3.25], [0.5, 3.25]])          # channel 1 constant
    row = np.array([[-2.0, -2.0, -2.0], [0.0, 1.0, 4.0]])               # token 0 constant
    return [(column, 4, 0), (row, 4, 1), (np.full((4, 3), 0.75), 2, 0), (np.full((4, 3), -1.5), 8, 1),
            (np.zeros((2, 5)), 1, 0)]


def _single_cases():
    rng = np.random.default_rng(1302)
    one_row = rng.standard_normal((1, 6))
    one_column = rng.standard_normal((6, 1))
    return [(one_row, 4, 0), (one_row, 4, 1), (one_column, 2, 0), (one_column, 2, 1), (np.array([[7.5]]), 3, 0)]


def _dequantize_cases():
    rng = np.random.default_rng(1303)
    codes0 = rng.integers(0, 16, (5, 4)).astype(np.uint8)
    codes1 = rng.integers(0, 4, (3, 6)).astype(np.uint8)
    return [(codes0, rng.random((1, 4)) * 0.3, rng.standard_normal((1, 4))),
            (codes1, rng.random((3, 1)) * 2.0, rng.standard_normal((3, 1))),
            (np.zeros((2, 3), np.uint8), np.zeros((1, 3)), np.array([[1.5, -2.0, 0.25]]))]


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    every_width = [(x, bits, axis) for bits in range(1, 9) for axis in (0, 1)
                   for x in [random_x(np.random.default_rng(1310 + 2 * bits + axis), 9, 7, bits, axis)]]
    dequantize_cases = _dequantize_cases()
    mixed = np.array([[1.0, 5.0, -3.0], [1.0, 5.0, 2.0], [1.0, 6.0, 0.5], [1.0, 5.0, 1.25]])
    return [
        quantized("the worked example of the statement, per channel (axis=0) and per token (axis=1)", 2,
                  [(WORKED_EXAMPLE, 2, 0), (WORKED_EXAMPLE, 2, 1)]),
        case("shapes and dtypes: codes uint8 of x's shape; scale and offset float, (1, d) for axis=0 and "
             "(T, 1) for axis=1", 1, _quantize_calls([(WORKED_EXAMPLE, 4, 0), (WORKED_EXAMPLE, 4, 1)]),
             _shapes_with_right_answer, [(WORKED_EXAMPLE, 4, 0), (WORKED_EXAMPLE, 4, 1)]),
        quantized("axis=0, one scale per channel: exact codes on random keys with outlier channels", 2,
                  _random_cases(1304, [(16, 8, 4, 0), (32, 12, 2, 0), (5, 3, 3, 0)], outliers=True)),
        quantized("axis=1, one scale per token: exact codes on random values", 2,
                  _random_cases(1305, [(16, 8, 4, 1), (7, 32, 2, 1), (3, 5, 6, 1)])),
        quantized("every bit width from 1 to 8, both axes", 2, every_width),
        quantized("constant slices: scale 0, codes 0 (a constant channel, a constant token, all constant)", 1,
                  _constant_cases()),
        quantized("a single token, a single channel, a single number", 1, _single_cases()),
        quantized("halves round to the even code, as np.round does", 1, [(HALVES, 2, 0), (HALVES.T.copy(), 2, 1)]),
        round_trip("the error bound: dequantize_kv(*quantize_kv(x, bits, axis)) is within half a step of x", 2,
                   _random_cases(1306, [(20, 6, 4, 0), (20, 6, 4, 1), (8, 16, 2, 0), (8, 16, 1, 1)],
                                 spread=30.0, outliers=True)),
        round_trip("no NaN: a constant channel beside others decodes exactly and finitely", 1,
                   [(mixed, 3, 0), (mixed.T.copy(), 3, 1), (np.zeros((3, 4)), 4, 1)]),
        case("dequantize_kv: codes * scale + offset, with scale and offset broadcast", 1,
             [Call(DEQUANT, args) for args in dequantize_cases], _dequantized, dequantize_cases),
        case("the input is not modified", 1, [Call(QUANT, (WORKED_EXAMPLE.copy(), 2, 0), True)],
             _with_right_answer, _inputs_untouched, (WORKED_EXAMPLE, 2, 0)),
        quantized("a cache-sized slice: 256 tokens of 64 channels, 4 and 2 bits", 1,
                  _random_cases(1307, [(256, 64, 4, 0), (256, 64, 2, 1)], outliers=True)),
    ]


EXERCISE = Exercise(name="quantize_kv", make_tests=make_tests)
