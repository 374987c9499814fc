"""A trained grouped-query model converted to a smaller cache without retraining.

Two conversions of every layer's key and value projections, W_k and W_v (G d rows of the
stacked ``wqkv``, G key/value heads of d rows each):

**Fewer heads** (``pool_kv_heads``): the G key/value heads become one, shared by every query head
(multi-query attention).  "mean" replaces each of W_k and W_v by the mean of its G heads' rows,
as the GQA paper (Ainslie et al., 2023) builds its groups from a multi-head checkpoint; "first"
keeps head 0 and drops the others.  Both are linear in the weights, so pooling the projections
pools the keys: RoPE rotates every head alike, and the mean of rotated keys is the rotated mean.
The cache keeps 2 d numbers per token and layer instead of 2 G d.

**A latent cache** (``truncate_kv_rank``): the stacked projection W = [W_k; W_v] (2 G d, D) is
replaced by its best rank-r approximation in the Frobenius norm (Eckart-Young), from its singular
value decomposition W = U S V^T:

    W_r = U_r S_r V_r^T,   latent c = x V_r (r numbers),   [k; v] = c (U_r S_r)^T

so the cache needs only c: r numbers per token and layer.  The keys are rotated after they are
rebuilt, so this latent cache cannot be absorbed (``lessons.latent_attention``): each step
rebuilds the keys and values from it.  With r = 2 G d the model is the same one, up to rounding.

Both return a new ``kvcache.model.Model`` that shares every other weight with the original.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from kvcache.model import LayerWeights, Model

from .harness import Kept

__all__ = ["pool_kv_heads", "truncate_kv_rank", "energy_kept", "kept_pooled", "kept_latent", "POOLINGS",
           "TOKENS_MEASURED"]

POOLINGS = ("mean", "first")

# Tokens of the fixed text the chapter judges each conversion on: five runs of the model over
# them (the full cache and four conversions) take about 4 s of one core, so the chapter stays
# well inside its 90 s on a machine whose two cores are shared with others.
TOKENS_MEASURED = 256


def _like(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``new`` in ``old``'s dtype and memory layout (the engine multiplies by stored transposes)."""
    new = new.astype(old.dtype, copy=False)
    return np.asfortranarray(new) if old.flags.f_contiguous and not old.flags.c_contiguous else np.ascontiguousarray(new)


def _split(model: Model, w: LayerWeights):
    """(W_q, W_k, W_v) rows of a layer's stacked projection, in float64."""
    cfg = model.config
    q, kv = cfg.q_width, cfg.kv_width
    wqkv = np.asarray(w.wqkv, np.float64)
    return wqkv[:q], wqkv[q:q + kv], wqkv[q + kv:]


def _with_layers(model: Model, layers: list[LayerWeights], **config) -> Model:
    cfg = dataclasses.replace(model.config, **config)
    return Model(cfg, model.embed, layers, model.norm, model.lm_head)


def pool_kv_heads(model: Model, how: str = "mean") -> Model:
    """The model with one key/value head per layer: the mean of its G heads' projections
    (``how="mean"``) or the first head's (``how="first"``)."""
    if how not in POOLINGS:
        raise ValueError(f"how must be one of {', '.join(POOLINGS)}, got {how!r}")
    cfg = model.config
    G, d = cfg.num_key_value_heads, cfg.head_dim
    layers = []
    for w in model.layers:
        wq, wk, wv = _split(model, w)
        heads_k, heads_v = wk.reshape(G, d, -1), wv.reshape(G, d, -1)
        k, v = (heads_k.mean(axis=0), heads_v.mean(axis=0)) if how == "mean" else (heads_k[0], heads_v[0])
        layers.append(dataclasses.replace(w, wqkv=_like(np.vstack([wq, k, v]), w.wqkv)))
    return _with_layers(model, layers, num_key_value_heads=1)


def truncate_kv_rank(model: Model, rank: int) -> Model:
    """The model whose every layer's [W_k; W_v] is its rank-``rank`` truncation by SVD."""
    cfg = model.config
    rows = 2 * cfg.kv_width
    if not 1 <= rank <= min(rows, cfg.hidden_size):
        raise ValueError(f"rank must be between 1 and {min(rows, cfg.hidden_size)}, got {rank}")
    layers = []
    for w in model.layers:
        wq, wk, wv = _split(model, w)
        U, S, Vt = np.linalg.svd(np.vstack([wk, wv]), full_matrices=False)
        low = (U[:, :rank] * S[:rank]) @ Vt[:rank]                       # (2 G d, D)
        layers.append(dataclasses.replace(w, wqkv=_like(np.vstack([wq, low]), w.wqkv)))
    return _with_layers(model, layers)


def energy_kept(model: Model, rank: int) -> float:
    """The share of the squared Frobenius norm of [W_k; W_v] its rank-``rank`` truncation keeps,
    sum of the ``rank`` largest squared singular values over the sum of all, averaged over the
    layers (Eckart-Young: what is lost is the rest)."""
    shares = []
    for w in model.layers:
        _, wk, wv = _split(model, w)
        S2 = np.linalg.svd(np.vstack([wk, wv]), compute_uv=False) ** 2
        shares.append(S2[:rank].sum() / S2.sum())
    return float(np.mean(shares))


def kept_pooled(head_dim: int, bits: int = 32) -> tuple[Kept, Kept]:
    """What one key/value head keeps per token and layer: a key and a value of d numbers."""
    return (Kept("keys", head_dim, bits), Kept("values", head_dim, bits))


def kept_latent(rank: int, bits: int = 32) -> tuple[Kept]:
    """What the latent cache keeps per token and layer: c, ``rank`` numbers."""
    return (Kept("latent", rank, bits),)
