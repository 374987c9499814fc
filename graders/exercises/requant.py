"""Hidden tests of ``requant(acc, m, s)`` (chapter 9): GA-2's requantizer, bit for bit.

    q = sat127(round_half_away(acc * m / 2^s))

for an int32 accumulator ``acc``, a 24-bit mantissa ``0 <= m < 2^24`` and a shift ``0 <= s <=
63``: halves go away from zero (2.5 -> 3, -2.5 -> -3) and the result is clamped to -127..127
(never -128).  A scalar gives a Python ``int``; an integer array gives an integer array of its
shape, the input left as it was.

The reference is exact rational arithmetic on Python ints (``fractions.Fraction``): no numpy, no
floats, no bit tricks, so it shares nothing with the machine's requantizer (``ga2.quant``, which
works on int64 words with shifts).  Products reach 2^55, beyond the 2^53 where float64 stops
holding every integer: four cases sit one unit below a tie, where a float product rounds onto the
tie and then away from zero.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..checks import Fail, describe, unchanged
from ..registry import Call, Exercise, Test, case

FN = "requant"
QMAX = 127
HALF = Fraction(1, 2)


# ------------------------------------------------------------------------------- reference


def _round_half_away(x: Fraction) -> int:
    magnitude = math.floor(abs(x) + HALF)
    return magnitude if x >= 0 else -magnitude


def reference(acc: int, m: int, s: int) -> int:
    """sat127(round_half_away(acc * m / 2^s)), exactly."""
    return max(-QMAX, min(QMAX, _round_half_away(Fraction(int(acc) * int(m), 2 ** int(s)))))


# The mistakes a hint can name: what each returns instead.
def _clamp(q: int, low: int = -QMAX) -> int:
    return max(low, min(QMAX, q))


MISTAKES = {
    "halves are rounded to the nearest even number (Python's round and np.round do that); GA-2 rounds "
    "them away from zero: 2.5 -> 3, -2.5 -> -3":
        lambda a, m, s: _clamp(round(Fraction(a * m, 2 ** s))),
    "negative halves are rounded up (floor(x + 0.5) gives -2.5 -> -2); GA-2 rounds them away from zero, "
    "-2.5 -> -3":
        lambda a, m, s: _clamp(math.floor(Fraction(a * m, 2 ** s) + HALF)),
    "the result is truncated toward zero instead of rounded":
        lambda a, m, s: _clamp(int(Fraction(a * m, 2 ** s))),
    "the result is rounded down (a plain >> s is a floor) instead of to the nearest integer":
        lambda a, m, s: _clamp((a * m) >> s),
    "the result is not saturated to -127..127":
        lambda a, m, s: _round_half_away(Fraction(a * m, 2 ** s)),
    "the result saturates at -128; GA-2's int8 is symmetric, -127..127":
        lambda a, m, s: _clamp(_round_half_away(Fraction(a * m, 2 ** s)), low=-128),
    "it matches float64 arithmetic: acc * m reaches 2^55, beyond the 2^53 where a float holds every "
    "integer, so compute the product in integers (Python ints or int64)":
        lambda a, m, s: _clamp(_float_round(float(a) * float(m) / 2.0 ** s)),
}


def _float_round(x: float) -> int:
    magnitude = math.floor(abs(x) + 0.5)
    return magnitude if x >= 0 else -magnitude


def _diagnose(cases, got) -> str:
    """The first mistake that explains every wrong value, or ""."""
    wrong = [(args, g) for args, g in zip(cases, got) if g != reference(*args)]
    for text, mistake in MISTAKES.items():
        if wrong and all(mistake(*args) == g for args, g in wrong):
            return text
    return ""


# ---------------------------------------------------------------------------- checking


def _as_scalar(value, what: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, np.generic) and np.issubdtype(value.dtype, np.integer):
        raise Fail(f"{what} is {describe(value)}; a scalar accumulator gives a Python int: use int(...)")
    if isinstance(value, (float, np.floating)):
        raise Fail(f"{what} is {describe(value)}; expected a Python int (the requantizer's result is a whole "
                   "number: round in integers)")
    raise Fail(f"{what} is {describe(value)}; expected a Python int")


def _as_int_array(value, shape: tuple, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise Fail(f"{what} is {describe(value)}; an array of accumulators gives a numpy array of integers")
    if value.dtype.kind not in "iu":
        raise Fail(f"{what} has dtype {value.dtype}; expected an integer dtype (int64, int32...)")
    if value.shape != shape:
        raise Fail(f"{what} has shape {value.shape}; expected the input's shape {shape}")
    return value


def _check_scalars(cases, expected, results):
    """Each case's result is a Python int, and the reference's."""
    got = [_as_scalar(results[k].value, f"case {k + 1} of {len(cases)}: the result") for k in range(len(cases))]
    bad = [k for k, (g, e) in enumerate(zip(got, expected)) if g != e]
    if bad:
        hint = _diagnose(cases, got)
        cases_text = ", ".join(str(k + 1) for k in bad[:6]) + (", ..." if len(bad) > 6 else "")
        raise Fail(f"{len(bad)} of {len(cases)} results are wrong (cases {cases_text})"
                   + (f"; {hint}" if hint else ""))


def _check_arrays(arrays, expected, originals, capture, results):
    """Each array's result is an integer array of its shape, the reference's entry by entry; the
    input left as it was (when ``capture``)."""
    for k, ((acc, m, s), want) in enumerate(zip(arrays, expected)):
        what = f"array {k + 1} of {len(arrays)}: the result" if len(arrays) > 1 else "the result"
        got = _as_int_array(results[k].value, acc.shape, what)
        if capture:
            unchanged(originals[k], results[k].originals_after[0], "the input array acc")
        wrong = got.astype(object) != want.astype(object)        # exact, whatever the dtype
        if np.any(wrong):
            flat = [(int(a), m, s) for a in acc.ravel()]
            hint = _diagnose(flat, [int(v) for v in got.ravel()])
            if not hint and acc.dtype == np.int32 and got.dtype == np.int32:
                hint = ("the result is int32, like the input: acc * m overflows 32 bits (it reaches 2^55); "
                        "compute in int64")
            raise Fail(f"{what} is wrong in {int(wrong.sum())} of {acc.size} entries"
                       + (f"; {hint}" if hint else ""))


def scalar_test(name: str, points: float, cases: list[tuple[int, int, int]]) -> Test:
    return case(name, points, [Call(FN, tuple(args)) for args in cases], _check_scalars, cases,
                [reference(*args) for args in cases], step="case")


def array_test(name: str, points: float, arrays: list[tuple[np.ndarray, int, int]], capture: bool = False) -> Test:
    expected = [np.array([reference(int(a), m, s) for a in acc.ravel()], dtype=np.int64).reshape(acc.shape)
                for acc, m, s in arrays]
    calls = [Call(FN, (acc, m, s), capture_args=capture) for acc, m, s in arrays]
    return case(name, points, calls, _check_arrays, arrays, expected, [acc.copy() for acc, _, _ in arrays], capture,
                step="array")


# The four products just below a tie (found by solving acc * m = 2^48 - 1 mod 2^49): float64
# rounds them onto the tie, and then away from zero, one level too far.
NEAR_TIES = [(2057768875, 16551165, 49), (-2057768875, 16551165, 49),
             (1619356391, 16512809, 49), (-1619356391, 16512809, 49)]

# The chapter's weights requantizer: a Q0.16 probability (65536 = 1) to an int8 weight (127 = 1).
WEIGHTS = (16646144, 33)


def _random_arrays(rng, n):
    """Accumulators across the int32 range and near zero, every shift, random mantissas."""
    arrays = []
    for _ in range(n):
        s = int(rng.integers(0, 64))
        m = int(rng.integers(0, 2 ** 24))
        scale = 2 ** int(rng.integers(0, 32))
        acc = np.clip(rng.integers(-scale, scale + 1, size=40), -2 ** 31, 2 ** 31 - 1).astype(np.int64)
        arrays.append((acc, m, s))
    return arrays


def _random_scalars(rng, n):
    return [(int(rng.integers(-2 ** 31, 2 ** 31)), int(rng.integers(2 ** 23, 2 ** 24)), int(rng.integers(40, 56)))
            for _ in range(n)]


def make_tests() -> list[Test]:
    rng = np.random.default_rng(9001)      # the array tests draw from it in turn, in the table's order
    return [
        scalar_test("probabilities to int8 weights (m = 16646144, s = 33, the chapter's example)", 1,
                    [(p, *WEIGHTS) for p in (19054, 13940, 27724, 4818, 65536, 0, 1, 258)]),
        scalar_test("rounding ties go away from zero, for both signs", 2, [
            (5, 1 << 23, 24), (-5, 1 << 23, 24), (3, 1 << 23, 24), (-3, 1 << 23, 24),     # +-2.5, +-1.5
            (4, 3 << 22, 25), (-4, 3 << 22, 25),                                           # 3 * 4 / 8 = 1.5
            (1, 1 << 23, 24), (-1, 1 << 23, 24),                                           # +-0.5
            (253 << 16, 1 << 23, 40), (-(253 << 16), 1 << 23, 40),                         # +-126.5
            (7, 1 << 23, 24), (-9, 1 << 23, 24)]),                                         # +-3.5, -4.5
        scalar_test("just beside a tie: the nearest integer, either side", 1, [
            (5 * 512 - 1, 1 << 23, 33), (-(5 * 512 - 1), 1 << 23, 33),    # 2.499...
            (5 * 512 + 1, 1 << 23, 33), (-(5 * 512 + 1), 1 << 23, 33)]),  # 2.500...
        scalar_test("saturation at both ends: -127 ... 127, never -128", 2, [
            (1000, 1 << 23, 23), (-1000, 1 << 23, 23), (-128, 1 << 23, 23), (128, 1 << 23, 23),
            (255, 1 << 23, 24), (-255, 1 << 23, 24),                                       # +-127.5
            (2 ** 31 - 1, 2 ** 24 - 1, 0), (-2 ** 31, 2 ** 24 - 1, 0), (127, 1 << 23, 23), (-127, 1 << 23, 23)]),
        scalar_test("s = 0: the product itself, saturated", 1, [
            (5, 3, 0), (-40, 3, 0), (42, 1, 0), (-127, 1, 0), (0, 2 ** 24 - 1, 0), (7, 0, 0), (-2, 64, 0)]),
        scalar_test("large shifts (up to s = 63)", 1, [
            (2 ** 31 - 1, 2 ** 24 - 1, 63), (-2 ** 31, 2 ** 24 - 1, 63), (-2 ** 31, 2 ** 24 - 1, 55),
            (-2 ** 31, 2 ** 24 - 1, 56), (2 ** 31 - 1, 2 ** 24 - 1, 54), (-2 ** 31, 1 << 23, 55),
            (1 << 30, 1 << 23, 46)]),
        scalar_test("products beyond 2^53 (acc near -2^31 and 2^31, m close to 2^24), exactly", 2, [
            (-2 ** 31, 2 ** 24 - 1, 48), (-2 ** 31, 2 ** 24 - 1, 49), (-2 ** 31, 2 ** 24 - 1, 50),
            (2 ** 31 - 1, 2 ** 24 - 3, 49)] + NEAR_TIES),
        scalar_test("numpy integer scalars in, Python ints out", 1, [
            (np.int32(-7), 1 << 23, 24), (np.int64(12345), 14805262, 31), (np.int32(2 ** 31 - 1), 2 ** 24 - 1, 49)]),
        array_test("an int32 array (as the machine's words are), products beyond 2^31 and 2^53", 2, [
            (np.array([-2 ** 31, 2 ** 31 - 1, -5, 5, 0, 255, -255, 1 << 20], dtype=np.int32), 2 ** 24 - 1, 49),
            (np.array([a for a, _, _ in NEAR_TIES[:2]], dtype=np.int32), NEAR_TIES[0][1], 49),
            (rng.integers(-2 ** 31, 2 ** 31, size=64, dtype=np.int64).astype(np.int32), 14169786, 48)]),
        array_test("arrays of every shape: 2-D, one element, empty (int64)", 1, [
            (rng.integers(-50_000, 50_000, size=(3, 5)), 8883301, 33),
            (np.array([19054], dtype=np.int64), *WEIGHTS),
            (np.zeros(0, dtype=np.int64), *WEIGHTS)]),
        array_test("the input array is left unmodified", 1, [
            (rng.integers(-2 ** 20, 2 ** 20, size=16, dtype=np.int64).astype(np.int32), 10052026, 31)], capture=True),
        array_test("24 random arrays: accumulators of every size, every shift, random mantissas", 2,
                   _random_arrays(rng, 24)),
        scalar_test("30 random scalars with 24-bit mantissas and large products", 1, _random_scalars(rng, 30)),
    ]


EXERCISE = Exercise(name="requant", make_tests=make_tests)
