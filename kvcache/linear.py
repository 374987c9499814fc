"""The one matrix product of every projection: y = x W^T, with W of shape (out, in) as transformers has it.

The model stores each W as the transpose of an (in, out) C-contiguous buffer (``stored_transposed``):
the same (out, in) array to read, but W^T lies in memory as x W^T reads it, so the product is the
plain x @ W^T.  For a decode step x has only a few rows (one per sequence), and OpenBLAS streams
a matrix in this layout faster than in its rows' layout: on the course's machine the whole
model's matrix-vector products ran at about 1.3 times the speed, the 49,152 x 576 output layer
at nearly twice (``bench/bench_model.py`` measures the model).

A W stored by rows (C-contiguous, as any array a caller makes) is taken the way that suits it:

* one row: (W x^T)^T is a matrix-vector product, which streams W once;
* two to ``BLOCK_ROWS`` rows: W cut into blocks of rows, (c, in) @ (in, N) each, small enough
  (at most ``SMALL_PRODUCT`` multiply-adds) that OpenBLAS multiplies a block where it lies
  instead of first copying it into a layout of its own;
* up to ``FEW_ROWS`` rows: (W x^T)^T, which OpenBLAS takes faster than x W^T;
* more rows: x W^T as written, where the copy is paid once for many rows.

Weights stored at 2 bytes (float16, bfloat16) go to ``kvcache.half.half_linear``: widened to
float32 a block at a time, accumulated in float32, the result rounded to their dtype.
"""
from __future__ import annotations

import numpy as np

from .half import half_linear

__all__ = ["linear", "stored_transposed", "BLOCK_ROWS", "FEW_ROWS", "SMALL_PRODUCT"]

BLOCK_ROWS = 4                  # up to this many rows, W in blocks of rows
FEW_ROWS = 16                   # up to this many rows, (W x^T)^T
SMALL_PRODUCT = 256 * 128 * 4   # multiply-adds of a block product (OpenBLAS takes it without copying)


def stored_transposed(w: np.ndarray) -> bool:
    """True when w (out, in) is the transpose of a C-contiguous (in, out) buffer."""
    return w.ndim == 2 and w.T.flags.c_contiguous and not w.flags.c_contiguous


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (N, in), w (out, in)  ->  x w^T (N, out)."""
    if w.dtype.itemsize == 2:                          # float16 / bfloat16 weights: kvcache.half
        return half_linear(x, w)
    N = len(x)
    if N > FEW_ROWS or stored_transposed(w):
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
