"""What a decode step of a Llama model costs, counted: FLOPs with the KV cache and without.

Convention: a multiply-add is 2 floating-point operations, and only matrix products are
counted (norms, rotary turns and softmax add O(D) or O(n) per token, far less).  With the letters
of ``kvcache.config`` and P the products of one token through one layer::

    P = 2 D (H d + 2 G d)   q, k, v projections
      + 2 (H d) D           output projection
      + 2 D (2 F) + 2 F D   SwiGLU: gate and up, then down

A token at position n - 1 attends to n keys: 2 H d n for the scores and 2 H d n for the
weighted sum (the H query heads each do their own; grouping shares the keys, not the work).

    with the cache, the step that makes token n:    L (P + 4 H d n)                 + 2 D V
    recomputing all n tokens to make the same one:  L (n P + 4 H d n (n + 1) / 2)   + 2 D V

(the output layer, 2 D V, runs for the last position only in both).  The cache turns a step
from O(n^2) into O(n); once n P dominates, the ratio grows like n.
"""
from __future__ import annotations

from .config import ModelConfig

__all__ = ["layer_products", "flops_cached_step", "flops_recompute_step", "speedup"]


def layer_products(cfg: ModelConfig) -> int:
    """P: FLOPs of one token's matrix products in one layer, attention scores excluded."""
    D, F = cfg.hidden_size, cfg.intermediate_size
    qkv = 2 * D * (cfg.q_width + 2 * cfg.kv_width)
    out = 2 * cfg.q_width * D
    mlp = 2 * D * 2 * F + 2 * F * D
    return qkv + out + mlp


def flops_cached_step(cfg: ModelConfig, n: int) -> int:
    """FLOPs of the cached step whose new token attends to n keys (itself included)."""
    attention = 4 * cfg.q_width * n
    return cfg.num_hidden_layers * (layer_products(cfg) + attention) + 2 * cfg.hidden_size * cfg.vocab_size


def flops_recompute_step(cfg: ModelConfig, n: int) -> int:
    """FLOPs of recomputing n tokens from scratch to get the logits after the last one."""
    attention = 4 * cfg.q_width * n * (n + 1) // 2
    return cfg.num_hidden_layers * (n * layer_products(cfg) + attention) + 2 * cfg.hidden_size * cfg.vocab_size


def speedup(cfg: ModelConfig, n: int) -> float:
    """The predicted ratio recompute / cached at context n: what the cache saves, counted."""
    return flops_recompute_step(cfg, n) / flops_cached_step(cfg, n)
