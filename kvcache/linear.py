"""The one matrix product of every projection: y = x W^T, with W stored (out, in) as transformers does.

For a decode step x has only a few rows (one per sequence).  OpenBLAS is slow at a product with
few rows whose other operand is transposed (it repacks all of W for every call); the same
product taken the other way round, (W x^T)^T, streams W once.  The numbers are the same.
"""
from __future__ import annotations

import numpy as np

__all__ = ["linear", "FEW_ROWS"]

FEW_ROWS = 16      # up to this many rows, (W x^T)^T


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (N, in), w (out, in)  ->  x w^T (N, out)."""
    if len(x) <= FEW_ROWS:
        return (w @ x.T).T
    return x @ w.T
