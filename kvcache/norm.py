"""RMSNorm and the SwiGLU feed-forward block: the two per-token pieces of a Llama layer.

RMSNorm (root-mean-square normalisation) rescales a hidden state x (D,) to unit RMS, then
multiplies by a learned gain w (D,)::

    rms_norm(x) = x / sqrt(mean(x ** 2) + eps) * w

Unlike LayerNorm it neither subtracts the mean nor adds a bias.

SwiGLU: a feed-forward block whose hidden layer is gated::

    ffn(x) = W_down ( silu(W_gate x) * (W_up x) ),      silu(z) = z * sigmoid(z)

W_gate and W_up are (F, D), W_down (D, F).
"""
from __future__ import annotations

import numpy as np

from .linear import linear

__all__ = ["rms_norm", "silu", "swiglu"]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x (..., D), weight (D,) -> x / sqrt(mean(x^2) + eps) * weight, same shape and dtype.

    One row (a decode step of one sequence) takes its root mean square as a scalar of x's
    dtype: the same roundings in the same order, so the same numbers, in four array operations
    instead of seven (each costs microseconds at this size, twice per layer)."""
    if x.size == x.shape[-1]:                                          # one row
        scalar = x.dtype.type
        rms = np.sqrt(np.square(x).sum() / scalar(x.shape[-1]) + scalar(eps))
        out = x / rms
        out *= weight
        return out
    ms = np.square(x).sum(axis=-1, keepdims=True)                      # (..., 1) sum of squares
    ms /= x.shape[-1]                                                  # mean (in place: x's dtype)
    ms += eps
    np.sqrt(ms, out=ms)
    out = x / ms                                                       # (..., D)
    out *= weight
    return out


def silu(z: np.ndarray) -> np.ndarray:
    """z * sigmoid(z) = z / (1 + exp(-z)), a new array of z's shape and dtype.

    exp(-z) overflows to inf for very negative z (below about -88 in float32), and z / inf is
    then 0 (-0.0), the function's limit: the overflow is the right answer, so its warning is
    silenced.  (numpy's exp is vectorized; its tanh, the other usual form, is several times
    slower in float32.)"""
    t = np.negative(z)
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += 1
    return np.divide(z, t, out=t)


def swiglu(x: np.ndarray, w_gate_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    """The feed-forward block of a Llama layer.

    x (N, D); w_gate_up (2F, D): W_gate's rows then W_up's (one product instead of two);
    w_down (D, F)  ->  (N, D) = (silu(x W_gate^T) * (x W_up^T)) W_down^T
    """
    gate_up = linear(x, w_gate_up)                             # (N, 2F)
    F = gate_up.shape[-1] // 2
    hidden = silu(gate_up[:, :F])                              # (N, F), a new array
    hidden *= gate_up[:, F:]
    return linear(hidden, w_down)                              # (N, F) -> (N, D)
