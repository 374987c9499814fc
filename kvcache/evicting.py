"""What every cache that keeps fewer tokens than it has seen shares: slots, and the position in each.

A plain cache keeps position p in row p: it holds every token the sequence has seen.  An evicting
cache holds a fixed number of **slots** per sequence and key/value head (its budget), and a table
of the original position each slot holds (-1: empty)::

    keys, values    [batch, kv_heads, slots, head_dim]    = [B, G, S, d]
    positions       [batch, kv_heads, slots]              the position held by each slot, or -1
    lengths         [batch]                               positions the sequence has reached

``lengths`` counts the tokens a sequence has seen, as in every layout (the model takes its next
rotary position from it); ``kept`` (batch,) counts those still held, never more than the slots.
The memory is the slots' whatever the length generated.  A slot keeps the key as the model
computed it, rotated at its **original** position: attention is invariant to the order of the
keys it reads, so slots may hold them in any order, and the kept keys keep the distances the
model was trained on (StreamingLLM, arXiv 2309.17453, re-assigns positions within the cache
instead, which needs keys cached before rotation and rotated again every step).

Which slot a new token takes, and which position it pushes out, is the policy: a ring buffer
(``kvcache.window``) or the heaviest accumulated attention (``kvcache.h2o``).  The writes are made
in ``attend``, not in ``update``: a step of n new tokens decides token by token, and a decision
may depend on the attention of the step's earlier queries (H2O) or free a slot one of them still
reads (the ring), so ``update`` only checks the plan and hands the step's keys and values over.

``crop(n)`` forgets positions >= n only while nothing has been evicted from a row (a position
evicted to make room for a cropped one is gone: the cache cannot be what it would have been).
"""
from __future__ import annotations

import math

import numpy as np

from . import validate
from .cache import (KVCache, LayerCache, buffer_bytes, check_crop, check_plan, check_reorder,
                    check_room, check_select, kv_bytes)
from .cache_dtypes import CacheDtype, cache_dtype
from .gqa import softmax_inplace
from .plan import StepPlan, plan_step

__all__ = ["EvictingLayerCache", "EvictingKVCache", "attend_visible"]

# Queries per block of a step's masked attention: bounds the (G, m, r, t) weights of a long prompt.
QUERY_BLOCK = 256


def attend_visible(q: np.ndarray, K: np.ndarray, V: np.ndarray, visible: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Attention of n queries to t keys under a mask of what each query sees.

    q (n, H, d); K, V (G, t, d); visible (n, t) bool, the same for every head, or (G, n, t), one
    per key/value head  ->  out (n, H, d) and the weights (G, n, r, t), r = H / G (query head
    h = g r + j reads key/value head g):

        weights = softmax over t of (q K^T / sqrt(d), -inf where not visible);  out = weights V

    Every query must see at least one key.
    """
    n, H, d = q.shape
    G, t, _ = K.shape
    r = H // G
    qg = (q * q.dtype.type(1 / math.sqrt(d))).reshape(n, G, r, d).transpose(1, 0, 2, 3)   # (G, n, r, d)
    s = (qg.reshape(G, n * r, d) @ K.transpose(0, 2, 1)).reshape(G, n, r, t)
    hidden = ~(visible if visible.ndim == 3 else visible[None])                         # (1|G, n, t)
    np.copyto(s, -np.inf, where=hidden[:, :, None, :])
    p = softmax_inplace(s)                                                              # (G, n, r, t)
    out = (p.reshape(G, n * r, t) @ V).reshape(G, n, r, d).transpose(1, 0, 2, 3).reshape(n, H, d)
    return out, p


class EvictingLayerCache(LayerCache):
    """One layer's slots for a batch of sequences (see the module doc).  A policy subclasses it
    with ``_attend_row(b, q, k, v, positions)``: write row b's new tokens and return their
    attention, and ``check()``: its invariants."""

    def __init__(self, batch: int, kv_heads: int, head_dim: int, max_len: int, slots: int,
                 dtype="float32", compute_dtype=np.float32, capacity: int | None = None):
        capacity = batch if capacity is None else capacity
        if not 1 <= batch <= capacity or max_len < 1 or slots < 1:
            raise ValueError(f"a cache needs 1 <= batch ({batch}) <= capacity ({capacity}), max_len >= 1 "
                             f"({max_len}) and at least one slot ({slots})")
        self.format: CacheDtype = cache_dtype(dtype)
        if self.format.grouped:          # a group's per-channel scales need its tokens kept together
            raise ValueError(f"an evicting cache stores rows one by one: {self.format.name} quantizes keys over "
                             "groups of tokens (use the contiguous or paged layout)")
        self.compute_dtype = np.dtype(compute_dtype)
        self._batch, self._capacity, self._max_len, self.slots = batch, capacity, max_len, slots
        self.kv_heads, self.head_dim = kv_heads, head_dim
        shape = (capacity, kv_heads, slots, head_dim)
        self.k = np.zeros(shape, self.format.storage)
        self.v = np.zeros(shape, self.format.storage)
        self.k_scale = np.zeros(shape[:3], np.float32) if self.format.scaled else None
        self.v_scale = np.zeros(shape[:3], np.float32) if self.format.scaled else None
        self.positions = np.full(shape[:3], -1, np.int64)          # [B, G, S]: -1 an empty slot
        self._lengths = np.zeros(capacity, np.int64)
        self._evicted = np.zeros(capacity, bool)                    # has row b ever evicted a position
        self._pending: tuple | None = None                          # (plan, k, v) between update and attend
        self._bytes_copied = 0

    # ------------------------------------------------------------------ sizes

    @property
    def batch(self) -> int:
        return self._batch

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_len(self) -> int:
        return self._max_len

    @property
    def lengths(self) -> np.ndarray:
        """(batch,) positions each sequence has reached (a read-only view)."""
        view = self._lengths[: self._batch]
        view.flags.writeable = False
        return view

    @property
    def kept(self) -> np.ndarray:
        """(batch,) positions each sequence still holds (every key/value head holds as many)."""
        return (self.positions[: self._batch, 0] >= 0).sum(axis=-1)

    @property
    def bytes_copied(self) -> int:
        return self._bytes_copied

    def kept_positions(self, row: int) -> np.ndarray:
        """(G, kept[row]) the positions row ``row`` holds, per key/value head, in increasing order."""
        pos = self.positions[row]
        return np.sort(pos, axis=-1)[:, pos.shape[1] - int((pos[0] >= 0).sum()):]

    # ------------------------------------------------------------------ a step

    def reserve(self, counts) -> StepPlan:
        """The plan of a step of counts[b] new tokens, at positions lengths[b] ..: only max_len
        (the positions a sequence may reach) limits it, never the slots."""
        counts = validate.step_counts(counts, self._batch)
        check_room(self.lengths, counts, self._max_len)
        return plan_step(counts, self.lengths)

    def update(self, k: np.ndarray, v: np.ndarray, plan: StepPlan) -> None:
        """Take the step's keys and values k, v (N, G, d); ``attend`` writes them (module doc)."""
        B = self._batch
        check_plan(plan, self._lengths[:B], "starts")
        self._pending = (plan, k, v)
        self._lengths[:B] = plan.ends

    def attend(self, q: np.ndarray, plan: StepPlan) -> np.ndarray:
        """Write each row's new tokens into its slots as the policy says, each query attending to
        what its row holds when it comes: q (N, H, d) -> (N, H, d)."""
        check_plan(plan, self._lengths[: self._batch], "ends")
        if self._pending is None or self._pending[0] is not plan:
            raise ValueError("attend takes the plan whose keys and values update was just given")
        _, k, v = self._pending
        self._pending = None
        out = np.empty_like(q)
        for b, (lo, hi) in enumerate(zip(plan.offsets[:-1].tolist(), plan.offsets[1:].tolist())):
            positions = plan.positions[lo:hi]
            out[lo:hi] = self._attend_row(b, q[lo:hi], k[lo:hi], v[lo:hi], positions)
        return out

    def _attend_row(self, b: int, q, k, v, positions) -> np.ndarray:
        """Row b's n new tokens (q (n, H, d), k, v (n, G, d) at ``positions``) -> (n, H, d)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ slots

    def _write(self, b: int, heads, slots, k, v, positions) -> None:
        """Keys and values k, v (m, d) into [b, heads, slots] (m each), which now hold ``positions``."""
        for buf, scales, x in ((self.k, self.k_scale, k), (self.v, self.v_scale, v)):
            if scales is None:
                buf[b, heads, slots] = x
            else:
                data, scale = self.format.encode(x)
                buf[b, heads, slots] = data
                scales[b, heads, slots] = scale
        self.positions[b, heads, slots] = positions

    def _read(self, buf, scales, b: int, slots=slice(None)) -> np.ndarray:
        """Row b's slots (G, s, d) back in the compute dtype."""
        scale = None if scales is None else scales[b, :, slots]
        return self.format.decode(buf[b, :, slots], scale, self.compute_dtype)

    def _gathered(self, b: int, order: np.ndarray, buf, scales) -> np.ndarray:
        """Row b's keys or values in the slots ``order`` (G, m) per head -> (G, m, d)."""
        heads = np.arange(self.kv_heads)[:, None]
        scale = None if scales is None else scales[b][heads, order]
        return np.array(self.format.decode(buf[b][heads, order], scale, self.compute_dtype))

    def _in_order(self, b: int) -> np.ndarray:
        """(G, kept) the slots of row b in increasing position."""
        pos = self.positions[b]
        kept = int((pos[0] >= 0).sum())
        return np.argsort(np.where(pos >= 0, pos, np.iinfo(np.int64).max), axis=-1, kind="stable")[:, :kept]

    def keys(self, row: int) -> np.ndarray:
        """The keys row ``row`` holds, in increasing position: (G, kept[row], d) (each head's own
        positions: ``kept_positions``)."""
        return self._gathered(row, self._in_order(row), self.k, self.k_scale)

    def values(self, row: int) -> np.ndarray:
        """The values row ``row`` holds, in increasing position: (G, kept[row], d)."""
        return self._gathered(row, self._in_order(row), self.v, self.v_scale)

    # ------------------------------------------------------------------ rearranging rows

    def _row_arrays(self) -> list[str]:
        """The names of the arrays with one entry per row (a policy adds its own)."""
        return ["k", "v", "k_scale", "v_scale", "positions", "_lengths", "_evicted"]

    def reorder(self, beam_idx) -> None:
        """Row i becomes a copy of old row beam_idx[i] (see ``LayerCache.reorder``)."""
        self._gather(check_reorder(beam_idx, self._batch, self._capacity))

    def select(self, rows) -> None:
        """Keep only the sequences ``rows`` (distinct), in that order."""
        self._gather(check_select(rows, self._batch))

    def _gather(self, idx: np.ndarray) -> None:
        """Row i <- old row idx[i], every array (the right side is a copy taken before writing)."""
        moved = np.flatnonzero(idx != np.arange(len(idx)))
        if len(moved):
            for name in self._row_arrays():
                buf = getattr(self, name)
                if buf is not None:
                    buf[moved] = buf[idx[moved]]
                    if name in ("k", "v", "k_scale", "v_scale"):
                        self._bytes_copied += len(moved) * buf[0].nbytes
        self._batch = len(idx)
        self._pending = None

    def crop(self, n) -> None:
        """Forget every position >= n (one n, or one per row), in a row that has evicted nothing
        (or whose positions are all below n); a ValueError otherwise, and nothing changes."""
        n = np.broadcast_to(check_crop(n, self._batch), (self._batch,))
        B = self._batch
        cut = n < self._lengths[:B]
        bad = np.flatnonzero(cut & self._evicted[:B])
        if len(bad):
            b = int(bad[0])
            raise ValueError(f"sequence {b} has evicted positions to make room for later ones: cropping "
                             f"it to {int(n[b])} cannot bring them back")
        for b in np.flatnonzero(cut).tolist():
            gone = self.positions[b] >= n[b]
            self.positions[b][gone] = -1
            self._forget(b, gone)
            self._lengths[b] = n[b]

    def _forget(self, b: int, gone: np.ndarray) -> None:
        """A policy's own state of the slots ``gone`` (G, S) of row b, now empty."""

    def copy(self) -> "EvictingLayerCache":
        """An independent copy (new buffers)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        for name in self._row_arrays():
            value = getattr(self, name)
            setattr(new, name, None if value is None else value.copy())
        new._pending = None
        return new

    # ------------------------------------------------------------------ bytes

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the slots: capacity x G x slots rows of keys and of values (and
        scales); the position table, 8 bytes a slot, is bookkeeping, counted apart."""
        return buffer_bytes(self.k, self.v, self.k_scale, self.v_scale)

    @property
    def used_bytes(self) -> int:
        """Bytes holding kept positions: sum(kept) x G rows of keys and values."""
        return kv_bytes(self.kept.sum(), self.kv_heads, self.format, self.head_dim)

    # ------------------------------------------------------------------ invariants

    def _check_common(self, b: int) -> np.ndarray:
        """The invariants every policy keeps in row b; returns its kept positions (G, kept)."""
        pos = self.positions[b]
        held = (pos >= 0).sum(axis=-1)
        assert (held == held[0]).all(), f"row {b}: its heads hold {held.tolist()} positions"
        assert held[0] <= self.slots, f"row {b} holds {int(held[0])} positions in {self.slots} slots"
        kept = self.kept_positions(b)
        assert (np.diff(kept, axis=-1) > 0).all(), f"row {b} holds a position twice"
        assert (kept < self._lengths[b]).all(), f"row {b} holds a position it has not reached"
        if not self._evicted[b]:
            assert held[0] == self._lengths[b], f"row {b} evicted nothing but holds {int(held[0])} " \
                                                f"of its {int(self._lengths[b])} positions"
        return kept


class EvictingKVCache(KVCache):
    """The layers of an evicting cache: ``kept`` and ``check()`` beside a KVCache's members."""

    @property
    def kept(self) -> np.ndarray:
        """(batch,) positions each sequence holds (the same in every layer)."""
        return self.layers[0].kept

    def check(self) -> None:
        """Every layer's invariants (``AssertionError`` naming the first broken one)."""
        for layer in self.layers:
            layer.check()

    def copy(self) -> "EvictingKVCache":
        return EvictingKVCache([layer.copy() for layer in self.layers], self.kind)
