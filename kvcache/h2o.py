"""Heavy hitters and recent tokens: the cache of H2O (arXiv 2306.14048), and TOVA's variant.

A budget of B slots per sequence, layer and key/value head.  Every position cached carries a score
(``acc``), the attention it has received::

    acc[g, j]  =  sum over the queries i that have seen j, and the r query heads h of group g,
                  of  softmax_j(q_i,h K_g^T / sqrt(d))

(``score="sum"``, H2O's accumulated attention; ``score="last"`` keeps only the newest query's
weights, the rule of TOVA, arXiv 2401.06104).  When a new token finds the B slots full, each
key/value head evicts, among the positions that are neither one of the first S (sinks) nor one of
the R - 1 before the new token (with it, the R recent), the one of smallest score, the latest of
equal ones, and the new token takes its slot.  After every step each head holds::

    the S sinks,  the R most recent positions,  and the B - S - R others of largest score

the choice ``keep_positions(acc, B, S, R)`` makes in one go over the positions of a head.

Granularity: per layer and per **key/value head**.  The cache stores a key/value head's row of
keys as its unit, and the r query heads of a group all read that row, so their attention is what
a slot is worth; each head keeps its own positions at no cost (attention does not need the heads
to agree, and every head holds as many).  One choice per layer (H2O's scores summed over heads)
would keep positions some heads never look at.

A step of n tokens goes token by token once the slots are full: query i attends to what its head
holds when it comes, its weights added to the scores, then token i + 1 evicts.  Until the slots
fill, the step's queries attend together, causally.
"""
from __future__ import annotations

import numpy as np

from . import validate
from .evicting import QUERY_BLOCK, EvictingKVCache, EvictingLayerCache, attend_visible
from .gqa import softmax_inplace

__all__ = ["HeavyHitterLayerCache", "h2o_cache", "attend_all", "keep_positions", "SCORES"]

SCORES = ("sum", "last")


def keep_positions(acc_scores, budget: int, n_sink: int, n_recent: int) -> np.ndarray:
    """The positions a cache of ``budget`` keeps of the t it has seen, in one go: every one when
    t <= budget, else the first n_sink, the last n_recent and the budget - n_sink - n_recent of
    largest score between them, a tie to the earlier position -> sorted int64 (min(t, budget),).

    The cache evicts one position per new token (``HeavyHitterLayerCache.victims``); after each,
    a head holds what this rule keeps of the positions it held, with the newest among the recent
    ones.  ValueError when n_sink + n_recent > budget or a count is negative."""
    if min(budget, n_sink, n_recent) < 0 or n_sink + n_recent > budget:
        raise ValueError(f"keep_positions needs 0 <= n_sink + n_recent <= budget, got n_sink={n_sink}, "
                         f"n_recent={n_recent}, budget={budget}")
    scores = np.asarray(acc_scores, dtype=np.float64)
    t = len(scores)
    if t <= budget:
        return np.arange(t, dtype=np.int64)
    between = np.arange(n_sink, t - n_recent)
    heaviest = between[np.argsort(-scores[between], kind="stable")[: budget - n_sink - n_recent]]
    return np.sort(np.concatenate([np.arange(n_sink), heaviest, np.arange(t - n_recent, t)])).astype(np.int64)


def attend_all(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One query against every slot: q (H, d), K, V (G, s, d) -> out (H, d), weights (G, r, s),
    weights = softmax(q_h K_g^T / sqrt(d)) for the r query heads h of group g (no mask: the one
    path that runs once per token and layer, so it makes as few calls as it can)."""
    G, s, d = K.shape
    r = q.shape[0] // G
    w = np.matmul(q.reshape(G, r, d) * q.dtype.type(1 / np.sqrt(d)), K.transpose(0, 2, 1))   # (G, r, s)
    softmax_inplace(w)
    return np.matmul(w, V).reshape(G * r, d), w


class HeavyHitterLayerCache(EvictingLayerCache):
    """One layer's ``budget`` slots per sequence and key/value head, evicting by score (module doc)."""

    def __init__(self, batch: int, kv_heads: int, head_dim: int, max_len: int, budget: int, recent: int,
                 sinks: int = 0, score: str = "sum", dtype="float32", compute_dtype=np.float32,
                 capacity: int | None = None):
        self.budget = validate.whole(budget, "budget", 1)
        self.recent = validate.whole(recent, "recent", 1)
        self.sinks = validate.whole(sinks, "sinks", 0)
        if self.sinks + self.recent > self.budget:
            raise ValueError(f"sinks ({self.sinks}) + recent ({self.recent}) must not exceed the budget ({self.budget})")
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        self.score = score
        super().__init__(batch, kv_heads, head_dim, max_len, self.budget, dtype, compute_dtype, capacity)
        self.acc = np.zeros(self.positions.shape, np.float64)             # [B, G, budget]

    def _row_arrays(self) -> list[str]:
        return super()._row_arrays() + ["acc"]

    def _forget(self, b: int, gone: np.ndarray) -> None:
        self.acc[b][gone] = 0.0

    def _observe(self, b: int, weights: np.ndarray) -> None:
        """Add (or, for "last", set) the scores of a block's weights (G, m, r, slots)."""
        if self.score == "sum":
            self.acc[b] += weights.sum(axis=(1, 2))
        else:
            self.acc[b] = weights[:, -1].sum(axis=1)

    def victims(self, b: int, incoming: int) -> np.ndarray:
        """(G,) the slot each head of row b frees for position ``incoming``: the smallest score
        among the positions neither sinks (< S) nor recent (> incoming - R), the latest of equal ones."""
        pos = self.positions[b]
        protected = (pos < self.sinks) | (pos > incoming - self.recent)
        key = np.where(protected, np.inf, self.acc[b])
        lowest = (key == key.min(axis=-1, keepdims=True)) & ~protected
        return np.argmax(np.where(lowest, pos, -1), axis=-1)

    def _attend_row(self, b: int, q, k, v, positions) -> np.ndarray:
        free = np.flatnonzero(self.positions[b, 0] < 0)          # every head has the same free slots
        n = len(positions)
        out = np.empty_like(q)
        done = min(n, len(free))
        if done:                                                 # the slots not yet full: all at once
            slots = free[:done]
            for i in range(done):
                self._write(b, slice(None), slots[i], k[i], v[i], positions[i])
            K, V = self._read(self.k, self.k_scale, b), self._read(self.v, self.v_scale, b)
            held = self.positions[b]                             # (G, slots)
            for lo in range(0, done, QUERY_BLOCK):
                hi = min(done, lo + QUERY_BLOCK)
                visible = (held[:, None, :] >= 0) & (held[:, None, :] <= positions[lo:hi, None][None])
                out[lo:hi], weights = attend_visible(q[lo:hi], K, V, visible)
                self._observe(b, weights)
        heads = np.arange(self.kv_heads)
        for i in range(done, n):                                 # full: one eviction per token
            p = int(positions[i])
            slots = self.victims(b, p)
            self._evicted[b] = True
            self._write(b, heads, slots, k[i], v[i], p)
            self.acc[b, heads, slots] = 0.0
            K, V = self._read(self.k, self.k_scale, b), self._read(self.v, self.v_scale, b)
            out[i], weights = attend_all(q[i], K, V)
            if self.score == "sum":
                self.acc[b] += weights.sum(axis=1)
            else:
                self.acc[b] = weights.sum(axis=1)
        return out

    def check(self) -> None:
        """Invariants, for every row b of length L and each key/value head: it holds min(L, B)
        distinct positions below L, among them the sinks 0 .. min(S, L) - 1 and the recent
        L - R .. L - 1; an empty slot scores 0."""
        for b in range(self._batch):
            kept = self._check_common(b)
            L = int(self._lengths[b])
            assert kept.shape[1] == min(L, self.budget), f"row {b} holds {kept.shape[1]} of min({L}, {self.budget})"
            must = set(range(min(self.sinks, L))) | set(range(max(0, L - self.recent), L))
            for g in range(self.kv_heads):
                lost = must - set(kept[g].tolist())
                assert not lost, f"row {b}, head {g} evicted sink or recent positions {sorted(lost)}"
            assert (self.acc[b][self.positions[b] < 0] == 0).all(), f"row {b}: an empty slot has a score"


def h2o_cache(n_layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype="float32",
              compute_dtype=np.float32, capacity: int | None = None, *, budget: int | None = None,
              recent: int | None = None, sinks: int = 0, score: str = "sum") -> EvictingKVCache:
    """``cache="h2o"``: ``budget`` slots per layer, sequence and key/value head, the ``recent``
    newest and ``sinks`` first positions kept, the rest by accumulated attention."""
    if budget is None or recent is None:
        raise TypeError("cache 'h2o' needs budget=B and recent=R (the newest positions always kept)")
    return EvictingKVCache([HeavyHitterLayerCache(batch, kv_heads, head_dim, max_len, budget, recent, sinks,
                                                  score, dtype, compute_dtype, capacity)
                            for _ in range(n_layers)], "h2o")
