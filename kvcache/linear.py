"""The one matrix product of every projection: y = x W^T, with W stored (out, in) as transformers does.

For a decode step x has only a few rows (one per sequence).  A general matrix product in
OpenBLAS first copies its operands into a layout of its own, which for a large W and a few rows
reads and writes all of W once more for every call: more than the product itself costs.  Taken
another way, the same numbers come without that copy:

* one row: (W x^T)^T is a matrix-vector product, which streams W once;
* two to ``BLOCK_ROWS`` rows: W cut into blocks of rows, (c, in) @ (in, N) each, small enough
  (at most ``SMALL_PRODUCT`` multiply-adds) that OpenBLAS multiplies a block where it lies.
  Such small products run on one thread, so with more rows the copying product, which OpenBLAS
  spreads over its threads, is as fast;
* up to ``FEW_ROWS`` rows: (W x^T)^T, which OpenBLAS takes faster than x W^T;
* more rows: x W^T as written, where the copy is paid once for many rows.

Weights stored at 2 bytes (float16, bfloat16) go to ``kvcache.half.half_linear``: widened to
float32 a block at a time, accumulated in float32, the result rounded to their dtype.
"""
from __future__ import annotations

import numpy as np

from .half import half_linear

__all__ = ["linear", "BLOCK_ROWS", "FEW_ROWS", "SMALL_PRODUCT"]

BLOCK_ROWS = 4                  # up to this many rows, W in blocks of rows
FEW_ROWS = 16                   # up to this many rows, (W x^T)^T
SMALL_PRODUCT = 256 * 128 * 4   # multiply-adds of a block product (OpenBLAS takes it without copying)


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (N, in), w (out, in)  ->  x w^T (N, out)."""
    if w.dtype.itemsize == 2:                          # float16 / bfloat16 weights: kvcache.half
        return half_linear(x, w)
    N = len(x)
    if N > FEW_ROWS:
        return x @ w.T
    out, width = w.shape
    c = max(1, SMALL_PRODUCT // (width * N))          # rows of w per block
    if N == 1 or N > BLOCK_ROWS or c >= out:
        return (w @ x.T).T
    full = out - out % c                               # rows in whole blocks; the rest: one product
    y = np.empty((out, N), np.result_type(x, w))
    y[:full] = (w[:full].reshape(full // c, c, width) @ x.T).reshape(full, N)   # (blocks, c, N)
    if full < out:
        y[full:] = w[full:] @ x.T
    return y.T
