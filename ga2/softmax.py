"""The GA-2 softmax unit (an exp table and a divider) and its real-number twin.

Input: int8 scores x_i in Q4.4, i.e. the real score is x_i / 16.  Output: Q0.16
probabilities p_i, i.e. the real probability is p_i / 65536::

    d_i = max(x) - x_i                     0..255  (subtracting the max keeps exp <= 1)
    e_i = EXP_TABLE[d_i] = floor(65536 * exp(-d_i / 16))
    z   = sum_i e_i
    p_i = (e_i * 65536 + z // 2) // z      (division rounded to nearest)

The largest score always has e = 65536, so z >= 65536 and no p_i exceeds 65536.
Example (running example A of the published GA-2 chapter): [11, 6, 17, -11] -> [19054, 13940, 27724, 4818].
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["FRAC_BITS_IN", "ONE_IN", "ONE_OUT", "EXP_TABLE", "softmax_fixed_array", "softmax_unit", "softmax_fixed",
           "softmax_float"]

FRAC_BITS_IN = 4           # Q4.4 scores
ONE_IN = 1 << FRAC_BITS_IN  # the score 1.0 is the integer 16
ONE_OUT = 1 << 16           # the probability 1.0 is the integer 65536

#: floor(65536 * exp(-d / 16)) for d = 0..255, the unit's 256-entry table.
EXP_TABLE = np.array([math.floor(ONE_OUT * math.exp(-d / ONE_IN)) for d in range(256)], dtype=np.int64)


def softmax_fixed_array(scores) -> np.ndarray:
    """The unit's output for int8 scores (shape (n,), n >= 1), as an int64 array."""
    x = np.asarray(scores, dtype=np.int64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("softmax_fixed takes a non-empty 1-D sequence of scores")
    if x.min() < -128 or x.max() > 127:
        raise ValueError("softmax_fixed takes int8 scores (-128..127)")
    return softmax_unit(x)


def softmax_unit(x: np.ndarray) -> np.ndarray:
    """The table and the divider on int64 scores already known to be int8, shape (n,), n >= 1."""
    e = EXP_TABLE[x.max() - x]          # (n,) in 0..65536; the max itself gets 65536
    z = int(e.sum())                    # >= 65536
    e *= ONE_OUT
    e += z // 2
    e //= z
    return e


def softmax_fixed(scores) -> list[int]:
    """The unit's Q0.16 probabilities for int8 Q4.4 scores, as a list of ints."""
    return [int(p) for p in softmax_fixed_array(scores)]


def softmax_float(scores, scale: float = 1 / ONE_IN) -> list[float]:
    """The real softmax the unit approximates: softmax(scores * scale), as floats in [0, 1].

    With the default scale the argument is read as Q4.4, like the unit's input;
    pass ``scale=1`` for real-valued scores.
    """
    x = np.asarray(scores, dtype=np.float64) * scale
    e = np.exp(x - x.max())
    return [float(v) for v in e / e.sum()]
