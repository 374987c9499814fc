"""Rotary position embeddings (RoPE), as Llama applies them to queries and keys.

A head's d numbers are taken as d/2 pairs: number i and number i + d/2 (the "rotate half"
layout of the Hugging Face checkpoints; the original paper paired neighbours 2i, 2i + 1, which is
the same rotation on a permuted head).  Pair i of the token at position p turns by the angle

    theta_i(p) = p * omega_i,       omega_i = base ** (-2 i / d),   i = 0 .. d/2 - 1,

fast for the first pairs and slow for the last.  A turn keeps lengths, and the dot product of a
query turned by p with a key turned by p' depends only on p - p': attention sees relative
positions.  Nothing is learned; the cache stores keys already turned, so a cached key never needs
its position again.
"""
from __future__ import annotations

import numpy as np

__all__ = ["inverse_frequencies", "rope_cos_sin", "full_width", "apply_rope"]


def inverse_frequencies(head_dim: int, base: float) -> np.ndarray:
    """omega_i = base ** (-2 i / d) for i = 0 .. d/2 - 1: (d/2,) float64."""
    return base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def rope_cos_sin(positions, head_dim: int, base: float, dtype=np.float64):
    """cos and sin of every angle p * omega_i: two (N, d/2) arrays for positions (N,).

    Computed in float64 whatever ``dtype`` (angles reach max_position_embeddings radians, where
    float32 keeps only about 4 decimals of the angle), then cast.
    """
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inverse_frequencies(head_dim, base)
    return np.cos(angles).astype(dtype, copy=False), np.sin(angles).astype(dtype, copy=False)


def full_width(cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tables at a head's full width, as ``apply_rope`` also takes them: (N, d/2) each ->
    [cos, cos] and [-sin, sin], (N, d) each."""
    return np.concatenate([cos, cos], axis=-1), np.concatenate([-sin, sin], axis=-1)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Turn every head of every token: x (N, heads, d), cos/sin (N, d/2) -> (N, heads, d).

    With x = [x1, x2] (the two halves of a head)::

        out = [x1 cos - x2 sin,  x2 cos + x1 sin]

    the 2-d rotation of each pair (x1_i, x2_i) by its angle.  A new array; x is not modified.
    Each half is written where it goes (no concatenation), one temporary for the sin terms.

    Tables at full width (``full_width``: cos/sin (N, d) = [cos, cos], [-sin, sin]) give the same
    numbers as out = x [cos, cos] + [x2, x1] [-sin, sin] (x2 (-sin) is -(x2 sin) exactly): four
    operations instead of six, faster for a few tokens (a decode step), slower for many (the
    swapped copy of x is one more pass over it).
    """
    if cos.shape[-1] == x.shape[-1]:
        return _apply_rope_full_width(x, cos, sin)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]              # (N, heads, d/2) each
    c, s = cos[:, None, :], sin[:, None, :]            # (N, 1, d/2): the same turn for every head
    out = np.empty(x.shape, np.result_type(x, cos))
    out1, out2 = out[..., :half], out[..., half:]
    np.multiply(x1, c, out=out1)
    sin_term = np.multiply(x2, s)
    out1 -= sin_term
    np.multiply(x2, c, out=out2)
    np.multiply(x1, s, out=sin_term)
    out2 += sin_term
    return out


def _apply_rope_full_width(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """``apply_rope`` with full-width tables: x (N, heads, d), cos/sin (N, d) -> (N, heads, d)."""
    half = x.shape[-1] // 2
    dtype = np.result_type(x, cos)
    out = np.multiply(x, cos[:, None, :], dtype=dtype)                      # x [cos, cos]
    swapped = np.concatenate((x[..., half:], x[..., :half]), axis=-1, dtype=dtype)   # [x2, x1]
    swapped *= sin[:, None, :]                                              # [-x2 sin, x1 sin]
    out += swapped
    return out
