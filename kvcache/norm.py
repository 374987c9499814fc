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
    """x (..., D), weight (D,) -> x / sqrt(mean(x^2) + eps) * weight, same shape and dtype."""
    ms = np.square(x).sum(axis=-1, keepdims=True) / x.shape[-1]        # (..., 1) mean of squares
    return x * (weight / np.sqrt(ms + eps))                            # (D,) / (..., 1) -> (..., D)


def silu(z: np.ndarray) -> np.ndarray:
    """z * sigmoid(z), with sigmoid(z) = (1 + tanh(z / 2)) / 2: no exp to overflow for large |z|."""
    return z * (0.5 + 0.5 * np.tanh(0.5 * z))


def swiglu(x: np.ndarray, w_gate_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    """The feed-forward block of a Llama layer.

    x (N, D); w_gate_up (2F, D): W_gate's rows then W_up's (one product instead of two);
    w_down (D, F)  ->  (N, D) = (silu(x W_gate^T) * (x W_up^T)) W_down^T
    """
    gate_up = linear(x, w_gate_up)                             # (N, 2F)
    F = gate_up.shape[-1] // 2
    return linear(silu(gate_up[:, :F]) * gate_up[:, F:], w_down)   # (N, F) -> (N, D)
