"""Two-byte floats: float16 and bfloat16 storage, and the matrix product over 2-byte weights.

The bits of one value (sign, exponent, mantissa)::

    float32    1 |  8 | 23     range to 3.4e38, relative step 2**-23
    bfloat16   1 |  8 |  7     float32's top half: the same range, relative step 2**-7
    float16    1 |  5 | 10     range to 65504, relative step 2**-10

numpy has float16 but no bfloat16; ``ml_dtypes`` (the dtype package of JAX and TensorFlow)
provides it as a numpy dtype.  Rounding to either is to nearest, ties to even.

numpy has no matrix product that reads 2-byte floats at BLAS speed, so ``half_linear`` does what
a GPU's tensor cores and transformers' ``torch_dtype=torch.bfloat16`` on CPU do with the same
numbers: widen, multiply-accumulate in float32, round the result once::

    x (N, in) float32,  W (out, in) at 2 bytes
    for each block of c rows of W (c in a buffer of BLOCK_FLOATS float32, small enough to stay
    in the processor's cache):
        Wb (c, in) float32 = widen(W[block])       bfloat16: the 16 bits shifted up, exact
        y[:, block] = x Wb^T                         float32 accumulation (BLAS)
    y = round(y to W's dtype), returned as float32  (transformers' product returns a 2-byte tensor)

Widening is exact (every 2-byte value is a float32).  A bfloat16 is the top half of a float32,
so its widening is a shift of the 16 bits into the top of a 32-bit word (``widen``): one pass,
no arithmetic on the values.  numpy widens float16 with its own cast, which is slower.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["bfloat16", "HALF_DTYPES", "is_half", "widen", "round_to", "half_linear", "BLOCK_FLOATS"]

bfloat16 = np.dtype(ml_dtypes.bfloat16)
HALF_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": bfloat16}
BLOCK_FLOATS = 64 * 1024          # float32 values of one widened block of weights (256 KiB)


def is_half(dtype) -> bool:
    """True for float16 and bfloat16 (numpy dtypes, or their names)."""
    try:
        return np.dtype(dtype) in HALF_DTYPES.values()
    except TypeError:
        return False


def widen(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A 2-byte array as float32, exactly (into ``out``, float32 of a's shape, when given).

    bfloat16: the uint16 words shifted left by 16 bits into uint32 words, read as float32.
    """
    if out is None:
        out = np.empty(a.shape, np.float32)
    if a.dtype == bfloat16:
        np.left_shift(a.view(np.uint16), np.uint32(16), out=out.view(np.uint32), dtype=np.uint32)
    else:
        np.copyto(out, a, casting="unsafe")
    return out


def round_to(x: np.ndarray, dtype) -> np.ndarray:
    """float32 x with every value rounded to the nearest ``dtype`` value (a new float32 array)."""
    return widen(x.astype(dtype))


def half_linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (N, in) float32, w (out, in) float16 or bfloat16  ->  x w^T (N, out) float32.

    Accumulated in float32, then every value rounded to w's dtype (as transformers rounds a
    2-byte product's result).  w is widened a block of rows at a time into one small buffer.
    """
    x = np.asarray(x, np.float32)
    out, width = w.shape
    N = x.shape[0]
    c = max(1, min(out, BLOCK_FLOATS // width))       # rows of w per widened block
    block = np.empty((c, width), np.float32)
    y = np.empty((out, N), np.float32)                 # (out, N): each block fills whole rows
    xt = x.T
    for lo in range(0, out, c):
        hi = min(out, lo + c)
        wb = widen(w[lo:hi], block[: hi - lo])
        np.matmul(wb, xt, out=y[lo:hi])                # (c, in) @ (in, N)
    return round_to(y.T, w.dtype)
