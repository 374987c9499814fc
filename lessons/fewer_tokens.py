"""Fewer tokens kept: which positions a query may see, and what that costs on a real model.

Every policy of chapter 14 is a rule for the set of positions query t attends to.  A rule that
depends on positions alone is a **mask**, visible[t, j], and then one teacher-forced pass over the
text computes exactly what decoding token by token would (``logits_under_mask``)::

    full cache        visible[t, j] = j <= t
    sliding window    visible[t, j] = t - W < j <= t
    sinks + window    visible[t, j] = j in sinks and j <= t,  or  t - W < j <= t

(StreamingLLM, arXiv 2309.17453: the sinks are the first S positions; ``sink_window_mask`` takes
any positions, the text's newlines for instance).  A policy that chooses by attention (H2O,
TOVA) has no mask known in advance: its choice at token t depends on what the layer attended to
before, so it runs through the engine's evicting caches (``kvcache.h2o``), which decide token by
token, layer by layer, within one pass (``cache_logits``).

At budgets up to 1,024 a whole pass per policy is too slow for a page: ``streaming_policies``
states the same five policies for ``lessons.shared_prefix``, which runs them from one full pass,
recomputing only the rows from the budget on, and each budget is judged on its own ``stretch``
of the text, the ``SCORED`` tokens after the first ``LATE`` evictions.

The attention a layer's heads give the first positions (``mass_on_first``) is read from the same
masked pass: the mean over queries t >= ``from_query`` of softmax weights on positions 0 .. k-1.
"""
from __future__ import annotations

import math

import numpy as np

from kvcache.linear import linear
from kvcache.norm import rms_norm, swiglu
from kvcache.rope import apply_rope

from .shared_prefix import Evicting, PositionRule

__all__ = ["window_mask", "sink_window_mask", "logits_under_mask", "mass_on_first", "cache_logits",
           "newline_positions", "repeated_passage", "POLICIES", "SINKS", "policy_logits", "bytes_per_position",
           "token_losses", "LATE", "SCORED", "streaming_policies", "stretch"]


def window_mask(T: int, window: int, sinks: int = 0) -> np.ndarray:
    """(T, T) bool: query t sees the first ``sinks`` positions and the last ``window`` (itself included)."""
    return sink_window_mask(T, window, np.arange(min(sinks, T)))


def sink_window_mask(T: int, window: int, sink_positions) -> np.ndarray:
    """(T, T) bool: query t sees positions t - W < j <= t and the sinks j <= t."""
    t = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    sink = np.zeros(T, bool)
    sink[np.asarray(sink_positions, np.int64)] = True
    return (j <= t) & ((j > t - window) | sink[None, :])


def _attention(q, k, v, visible, first: int):
    """Masked attention of one sequence: q (T, H, d), k, v (T, G, d), visible (T, T) -> (T, H, d),
    and each head's weights on the first ``first`` positions, (H, T, first).  Written out here
    (scores, mask, softmax, weighted sum), apart from the engine's attention it is compared with."""
    T, H, d = q.shape
    G = k.shape[1]
    r = H // G
    qg = q.transpose(1, 0, 2).reshape(G, r * T, d) / math.sqrt(d)   # head h = g r + j reads kv head g
    s = (qg @ k.transpose(1, 2, 0)).reshape(H, T, T)                # (H, T, T)
    s = np.where(visible[None], s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    w = s / s.sum(axis=-1, keepdims=True)
    out = (w.reshape(G, r * T, T) @ v.transpose(1, 0, 2)).reshape(H, T, d)
    return out.transpose(1, 0, 2), w[:, :, :first].copy()


def logits_under_mask(model, ids, visible: np.ndarray, first: int = 0):
    """The model's logits at every position (T, V) when query t attends to the positions
    visible[t] only, each key at its own rotary position; with ``first`` > 0 also the weights of
    every layer and head on the first ``first`` positions, (L, H, T, first)."""
    ids = model.check_tokens(ids)
    T = len(ids)
    if visible.shape != (T, T) or not visible[np.arange(T), np.arange(T)].all():
        raise ValueError(f"visible must be ({T}, {T}) with every query seeing itself")
    cfg = model.config
    H, G, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    cos, sin = model._rope(np.arange(T))
    x = model._embed_rows(ids)
    weights = []
    for w in model.layers:
        h = rms_norm(x, w.attn_norm, cfg.rms_norm_eps)
        qkv = linear(h, w.wqkv)
        qk = apply_rope(qkv[:, : cfg.q_width + cfg.kv_width].reshape(T, H + G, d), cos, sin)
        v = qkv[:, cfg.q_width + cfg.kv_width:].reshape(T, G, d)
        o, on_first = _attention(qk[:, :H], qk[:, H:], v, visible, first)
        weights.append(on_first)
        x += linear(o.reshape(T, H * d), w.wo)
        x += swiglu(rms_norm(x, w.mlp_norm, cfg.rms_norm_eps), w.w_gate_up, w.w_down)
    logits = model._head(x)
    return (logits, np.array(weights)) if first else logits


def mass_on_first(weights: np.ndarray, k: int, from_query: int) -> np.ndarray:
    """(L, H): the mean over queries t >= from_query of the weight on positions 0 .. k - 1, from
    ``logits_under_mask``'s weights (L, H, T, first >= k)."""
    return weights[:, :, from_query:, :k].sum(axis=-1).mean(axis=-1)


def cache_logits(model, ids, kind: str, **options) -> np.ndarray:
    """The logits at every position (T, V) of one pass over ``ids`` through an engine cache of
    layout ``kind`` (``window``, ``h2o``) with its options: each query sees what the cache holds
    when it comes, decided token by token."""
    cache = model.new_cache(1, len(ids), kind=kind, **options)
    return model.forward(ids, [len(ids)], cache, every_token=True)


def newline_positions(tokenizer, ids, count: int, after: int = 0) -> np.ndarray:
    """The positions of the first ``count`` tokens after position ``after`` whose text contains
    a newline."""
    found = [i for i, t in enumerate(ids) if i > after and "\n" in tokenizer.decode([t])]
    if len(found) < count:
        raise ValueError(f"only {len(found)} newline tokens after position {after}")
    return np.array(found[:count], np.int64)


def repeated_passage(ids, passage: int, gap: int) -> tuple[list[int], int]:
    """A probe of what eviction loses: the text's first ``passage`` tokens, the ``gap`` tokens
    that follow them, then the first ``passage`` tokens again.  Returns (ids, start of the copy)."""
    ids = list(ids)
    if passage + gap > len(ids):
        raise ValueError(f"the text has {len(ids)} tokens; {passage} + {gap} were asked for")
    return ids[:passage + gap] + ids[:passage], passage + gap


# ---------------------------------------------------------------------- the policies at a budget

POLICIES = ("window", "4 sinks + window", "4 newlines + window", "H2O", "TOVA")
SINKS = 4


def policy_logits(model, ids, policy: str, budget: int, newlines=None) -> np.ndarray:
    """The logits at every position (T, V) when every layer and key/value head keeps ``budget``
    positions by ``policy``:

        window               the last B positions                          (a mask)
        4 sinks + window     positions 0 .. 3 and the last B - 4           (a mask)
        4 newlines + window  the ``newlines`` positions and the last B - 4 (a mask)
        H2O                  the heaviest accumulated attention and the last B / 2  (``cache="h2o"``)
        TOVA                 the heaviest attention of the newest query, the newest kept
                             (``cache="h2o"`` with ``score="last"``, ``recent=1``)
    """
    T = len(ids)
    if policy == "window":
        return logits_under_mask(model, ids, window_mask(T, budget))
    if policy == "4 sinks + window":
        return logits_under_mask(model, ids, window_mask(T, budget - SINKS, SINKS))
    if policy == "4 newlines + window":
        return logits_under_mask(model, ids, sink_window_mask(T, budget - SINKS, newlines))
    if policy == "H2O":
        return cache_logits(model, ids, "h2o", budget=budget, recent=budget // 2)
    if policy == "TOVA":
        return cache_logits(model, ids, "h2o", budget=budget, recent=1, score="last")
    raise ValueError(f"no policy {policy!r}: the policies are {', '.join(POLICIES)}")


def bytes_per_position(model, bytes_per_number: int = 4) -> int:
    """Bytes one kept position costs in every layer: a key and a value per key/value head."""
    cfg = model.config
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * bytes_per_number


def token_losses(logits: np.ndarray, ids) -> np.ndarray:
    """(T - 1,) -log p_t(token t + 1): the loss of each next token, from the logits (T, V)."""
    ids = np.asarray(ids)
    z = logits[:-1].astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -log_p[np.arange(len(ids) - 1), ids[1:]]


# ---------------------------------------------------------------------- every budget, from one full pass

LATE, SCORED = 128, 128      # tokens read after the cache fills before the loss is counted; tokens counted


def streaming_policies(budget: int, newlines) -> list:
    """``POLICIES`` at ``budget`` as ``lessons.shared_prefix`` policies, in that order: three
    masks (the rules of ``policy_logits``) and the engine's H2O and TOVA rules, replayed exactly."""
    recent = budget - SINKS
    marks = np.asarray(newlines, np.int64)
    return [PositionRule("window", lambda p, j: j > p - budget),
            PositionRule("4 sinks + window", lambda p, j: (j < SINKS) | (j > p - recent)),
            PositionRule("4 newlines + window", lambda p, j: np.isin(j, marks) | (j > p - recent)),
            Evicting("H2O", budget, budget // 2),
            Evicting("TOVA", budget, 1, score="last")]


def stretch(budget: int, late: int = LATE, scored: int = SCORED) -> tuple[int, int, int]:
    """(start, first, stop) of a budget's measurement: the rows the policies recompute start at
    budget - SINKS (before the budget nothing is evicted, but the newlines' window of B - 4
    positions hides the text's first four from query B - 4 on); the loss is counted on the
    ``scored`` next tokens predicted by rows first = budget + late .. stop - 2 (row stop - 1 only
    holds the last target)."""
    first = budget + late
    return budget - SINKS, first, first + scored + 1
