"""A sliding window with attention sinks, as a ring buffer: the cache of StreamingLLM.

The query at position p sees the first S positions (the **sinks**) and the last W, itself
included (arXiv 2309.17453; S = 0 is a plain sliding window)::

    visible(p, j)  =  j <= p  and  (j < S  or  j > p - W)

Which positions a query sees depends on positions alone, so the cache needs no scores: S + W
slots, position j in slot

    slot(j) = j                       for j < S        (a sink: never overwritten)
            = S + (j - S) mod W       for j >= S       (the ring)

A new token at p >= S takes the slot of p - W, the one position that just left its window.  The
memory is S + W slots whatever the length, and the outputs are those of full attention under the
mask above, token by token (the tests compare the two).  A step of n tokens attends to the slots
it found plus its own keys under that mask, then writes only the ones the ring keeps, so a
prompt longer than the window is one step, exact.
"""
from __future__ import annotations

import numpy as np

from . import validate
from .evicting import QUERY_BLOCK, EvictingKVCache, EvictingLayerCache, attend_visible

__all__ = ["WindowLayerCache", "window_cache", "ring_slot", "window_visible"]


def ring_slot(positions, window: int, sinks: int) -> np.ndarray:
    """The slot of each position: j for a sink (j < S), S + (j - S) mod W after."""
    j = np.asarray(positions, np.int64)
    return np.where(j < sinks, j, sinks + (j - sinks) % window)


def window_visible(query_positions, key_positions, window: int, sinks: int) -> np.ndarray:
    """(n, t) bool: key j visible to query p  <=>  0 <= j <= p and (j < S or j > p - W)."""
    p = np.asarray(query_positions, np.int64)[:, None]
    j = np.asarray(key_positions, np.int64)[None, :]
    return (j >= 0) & (j <= p) & ((j < sinks) | (j > p - window))


class WindowLayerCache(EvictingLayerCache):
    """One layer's ring buffer of ``sinks`` + ``window`` slots per sequence (see the module doc)."""

    def __init__(self, batch: int, kv_heads: int, head_dim: int, max_len: int, window: int, sinks: int = 0,
                 dtype="float32", compute_dtype=np.float32, capacity: int | None = None):
        self.window = validate.whole(window, "window", 1)
        self.sinks = validate.whole(sinks, "sinks", 0)
        super().__init__(batch, kv_heads, head_dim, max_len, self.sinks + self.window, dtype, compute_dtype,
                         capacity)

    def _attend_row(self, b: int, q, k, v, positions) -> np.ndarray:
        W, S = self.window, self.sinks
        n = len(positions)
        if n == 1:                               # the slot taken held p - W, outside p's window
            slot = ring_slot(positions, W, S)
            self._evicted[b] |= bool(self.positions[b, 0, slot[0]] >= 0)
            self._write(b, slice(None), slot[0], k[0], v[0], positions[0])
            held = self.positions[b, 0] >= 0
            K, V = self._read(self.k, self.k_scale, b), self._read(self.v, self.v_scale, b)
            return attend_visible(q, K, V, held[None])[0]
        held = self.positions[b, 0]                                          # (slots,) every head alike
        K = np.concatenate([self._read(self.k, self.k_scale, b), k.transpose(1, 0, 2)], axis=1)
        V = np.concatenate([self._read(self.v, self.v_scale, b), v.transpose(1, 0, 2)], axis=1)
        key_positions = np.concatenate([held, positions])
        out = np.empty_like(q)
        n_old = len(held)
        new_sinks = n_old + np.flatnonzero(positions < S)
        for lo in range(0, n, QUERY_BLOCK):
            hi = min(n, lo + QUERY_BLOCK)
            # the block's keys: every slot, the step's sinks, and its own band (lo - W, hi)
            first = max(lo - W + 1, 0)
            cols = np.concatenate([np.arange(n_old), new_sinks[new_sinks < n_old + first],
                                   np.arange(n_old + first, n_old + hi)])
            visible = window_visible(positions[lo:hi], key_positions[cols], W, S)
            out[lo:hi] = attend_visible(q[lo:hi], K[:, cols], V[:, cols], visible)[0]
        end = int(positions[-1]) + 1
        keep = np.flatnonzero((positions < S) | (positions >= end - W))     # distinct slots
        slots = ring_slot(positions[keep], W, S)
        self._evicted[b] |= bool((self.positions[b, 0, slots] >= 0).any()) or len(keep) < n
        for i, slot in zip(keep.tolist(), slots.tolist()):
            self._write(b, slice(None), slot, k[i], v[i], positions[i])
        return out

    def check(self) -> None:
        """Invariants, for every row b of length L: it holds exactly the sinks 0 .. min(S, L) - 1
        and the last positions max(S, L - W) .. L - 1 (every key/value head the same), each in its
        ring slot, and never more than S + W."""
        for b in range(self._batch):
            kept = self._check_common(b)
            L = int(self._lengths[b])
            expected = np.concatenate([np.arange(min(self.sinks, L)), np.arange(max(self.sinks, L - self.window), L)])
            for g in range(self.kv_heads):
                assert kept[g].tolist() == expected.tolist(), \
                    f"row {b}, head {g} holds {kept[g].tolist()}, not the sinks and window {expected.tolist()}"
            held = np.flatnonzero(self.positions[b, 0] >= 0)
            assert (ring_slot(self.positions[b, 0, held], self.window, self.sinks) == held).all(), \
                f"row {b}: a position is not in its ring slot"


def window_cache(n_layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype="float32",
                 compute_dtype=np.float32, capacity: int | None = None, *, window: int | None = None,
                 sinks: int = 0) -> EvictingKVCache:
    """``cache="window"``: a ring buffer of ``sinks`` + ``window`` slots per layer and sequence."""
    if window is None:
        raise TypeError("cache 'window' needs window=W (the recent positions kept; sinks=S adds the first S)")
    return EvictingKVCache([WindowLayerCache(batch, kv_heads, head_dim, max_len, window, sinks, dtype,
                                             compute_dtype, capacity) for _ in range(n_layers)], "window")
