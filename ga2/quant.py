"""int8 arithmetic of GA-2: per-tensor scales, quantization, requantization.

A real tensor v is stored as int8 codes q with one scale per tensor::

    scale = max|v| / 127                     (symmetric: the largest value maps to +-127)
    q     = sat127(round_half_away(v / scale))    v ~ q * scale

A product of int8 tensors accumulates in int32, in units of ``scale_a * scale_b``.
The requantizer brings it back to int8 at ``scale_out`` by multiplying with

    x = scale_a * scale_b / scale_out  ~  m / 2^s,   2^23 <= m < 2^24   (``mantissa_shift``)

entirely in integers: ``q = sat127(round_half_away(acc * m / 2^s))``.

Functions take Python numbers, (nested) lists or numpy arrays and answer in kind: a
scalar as a Python ``int`` (or ``float``), a list as a list, an array as a numpy array
(int64 for codes).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = [
    "QMAX", "round_half_away", "saturate", "scale_for", "quantize", "dequantize",
    "mantissa_shift", "requant", "matmul_int8",
]

QMAX = 127  # symmetric int8: -127..127 (-128 is never produced)


def _is_scalar(x) -> bool:
    return np.ndim(x) == 0


def _in_kind(given, result):
    """``result`` as (nested) lists when ``given`` was a list or tuple, else as it is."""
    return result.tolist() if isinstance(given, (list, tuple)) else result


def round_half_away(x):
    """Round to the nearest integer, halves away from zero: 2.5 -> 3, -2.5 -> -3."""
    a = np.asarray(x, dtype=np.float64)
    r = np.sign(a) * np.floor(np.abs(a) + 0.5)
    return int(r) if _is_scalar(x) else r.astype(np.int64)


def saturate(q, limit: int = QMAX):
    """Clamp integers to -limit..limit."""
    r = np.minimum(np.maximum(q, -limit), limit)   # np.clip's checks cost more than the clamp itself
    return int(r) if _is_scalar(q) else np.asarray(r, dtype=np.int64)


def scale_for(values) -> float:
    """The symmetric int8 scale of a tensor: max|v| / 127 (1.0 for an all-zero tensor)."""
    peak = float(np.max(np.abs(np.asarray(values, dtype=np.float64)))) if np.size(values) else 0.0
    return peak / QMAX if peak > 0 else 1.0


def quantize(values, scale: float):
    """int8 codes of ``values`` at ``scale``: sat127(round_half_away(v / scale))."""
    return _in_kind(values, saturate(round_half_away(np.divide(values, scale))))


def dequantize(codes, scale: float):
    """The real values the codes stand for: q * scale."""
    r = np.multiply(codes, scale, dtype=np.float64)
    return float(r) if _is_scalar(codes) else r


def mantissa_shift(x: float) -> tuple[int, int]:
    """(m, s) with 2^23 <= m < 2^24 and m / 2^s the closest such fraction to x > 0.

    Writing x = f * 2^e with 1/2 <= f < 1 (``math.frexp``), m = round(f * 2^24) and
    s = 24 - e.  Rounding can carry f * 2^24 up to 2^24 exactly; then m = 2^23, s - 1.
    Example: 127 / 65536 = (127/128) * 2^-9  ->  (16646144, 33).
    """
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"a requantizer multiplier must be positive and finite, got {x!r}")
    f, e = math.frexp(x)
    m, s = math.floor(f * (1 << 24) + 0.5), 24 - e
    if m == 1 << 24:
        m, s = 1 << 23, s - 1
    if s < 0:
        raise ValueError(f"multiplier {x!r} is too large for a 24-bit mantissa and a shift >= 0")
    return m, s


def requant(acc, m: int, s: int, relu: int = 0):
    """The requantizer: sat127(round_half_away(acc * m / 2^s)), then max(0, .) if relu.

    Exact integer arithmetic on p = acc * m (|p| < 2^55 for an int32 acc and m < 2^24).
    For s >= 1, with h = 2^(s-1), round_half_away(p / 2^s) is
        (p + h) >> s          when p >= 0
        (p + h - 1) >> s      when p < 0   (= -((|p| + h) >> s): ties go down, away from 0)
    """
    if _is_scalar(acc):
        p = int(acc) * int(m)
        q = (p + (1 << s >> 1) - (p < 0)) >> s if s > 0 else p
        q = max(-QMAX, min(QMAX, q))
        return max(0, q) if relu else q
    if isinstance(acc, (list, tuple)):
        return requant(np.asarray(acc, dtype=np.int64), m, s, relu).tolist()
    p = np.asarray(acc, dtype=np.int64) * m
    if s > 0:
        negative = p < 0
        p += 1 << (s - 1)
        p -= negative
        p >>= s
    np.minimum(p, QMAX, out=p)
    np.maximum(p, 0 if relu else -QMAX, out=p)      # the ReLU is a floor of 0 instead of -127
    return p


def matmul_int8(a, b):
    """C = A B for int8 matrices A (M x K) and B (K x N), exact in int64 (int32 in hardware).

    Lists of lists in, lists of lists out; otherwise a numpy int64 array.

    |C| <= K * 128 * 128 = 2^20 for K <= 64, well inside int32.
    """
    lists = isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a.size and (a.min() < -128 or a.max() > 127) or b.size and (b.min() < -128 or b.max() > 127):
        raise ValueError("matmul_int8 takes int8 operands (-128..127)")
    product = a @ b
    return product.tolist() if lists else product
