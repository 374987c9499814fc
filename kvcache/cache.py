"""The KV cache of a batch of sequences: one object per layer, behind one interface.

Layout (the one transformers uses)::

    keys, values    [batch, kv_heads, positions, head_dim]   = [B, G, L_max, d]
    lengths         [batch]                                   tokens cached for each sequence

Every sequence has its own length: row b holds positions 0 .. lengths[b] - 1, and whatever lies
beyond is never read.  The buffers are allocated once, for L_max positions (preallocation: no
copy when a sequence grows, at the price of reserving room it may never use).

The interface a layer's attention sees (``LayerCache``, an abstract base class)::

    reserve(counts) -> plan   check that counts[b] new positions fit in row b; the step's plan
    update(k, v, plan)        write the step's keys and values                 (in place)
    attend(q, plan)           the step's queries attend to their rows' caches
    reorder(beam_idx)         row i becomes old row beam_idx[i] (repeats allowed: beam search)
    select(rows)              keep only these rows, in this order (finished sequences leave)
    crop(n)                   forget positions >= n (one n for all rows, or one per row)

The model calls only ``reserve`` (once per step, on the ``KVCache``), ``update`` and ``attend``,
so it never knows how the positions are laid out: another layout is another ``LayerCache``
listed under its own name in ``kvcache.layouts``, where ``new_cache(kind, ...)`` /
``generate.greedy(..., cache=kind)`` select it: "contiguous" (``contiguous_cache``, here) or
"paged" (``kvcache.paged``: fixed-size blocks from one pool, with block tables).  ``KVCache`` holds the layers of one
model, checks that a step fits before any layer writes (``reserve``), and applies
reorder/select/crop to every layer; the checks of their arguments are written once
(``check_reorder``, ``check_select``, ``check_crop``) for every layout.

New tokens arrive packed: k, v (N, G, d) with N = sum(counts), row 0's tokens first, every
counts[b] >= 1.  The plan (``kvcache.plan.StepPlan``) says where each goes and whether the step
is a decode (every count 1), decided there once; a layer keeps no state between ``update`` and
``attend``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from . import validate
from .cache_dtypes import CacheDtype, cache_dtype
from .gqa import attend_new_tokens, decode_attention
from .plan import StepPlan, plan_step

__all__ = ["CacheFullError", "LayerCache", "ContiguousLayerCache", "KVCache", "StepPlan",
           "contiguous_cache", "reorder_cache",
           "check_reorder", "check_select", "check_crop", "check_room", "check_plan"]


class CacheFullError(ValueError):
    """A step would write past a sequence's room (named in the message); nothing was written."""


# ---------------------------------------------------------------------- the checks every layout shares


def check_reorder(beam_idx, batch: int, capacity: int) -> np.ndarray:
    """``reorder``'s argument: 1 to ``capacity`` rows, each one of the ``batch`` held (repeats
    allowed) -> int64 (n,)."""
    idx = validate.index(beam_idx, batch, "beam index")
    if not 1 <= len(idx) <= capacity:
        raise ValueError(f"reorder to {len(idx)} sequences: the cache has room for 1 to {capacity}")
    return idx


def check_select(rows, batch: int) -> np.ndarray:
    """``select``'s argument: distinct rows of the ``batch`` held -> int64 (n,)."""
    idx = validate.index(rows, batch, "row")
    if len(np.unique(idx)) != len(idx):
        raise ValueError(f"select takes distinct rows, got {[int(i) for i in idx]} (reorder repeats rows)")
    return idx


def buffer_bytes(*buffers) -> int:
    """Bytes of the buffers a layer allocated (``None``: a format without that buffer, e.g. scales)."""
    return sum(b.nbytes for b in buffers if b is not None)


def kv_bytes(positions: int, kv_heads: int, fmt, head_dim: int) -> int:
    """Bytes ``positions`` cached positions hold in one layer: 2 (keys, values) x positions x G rows
    of ``fmt.bytes_per_row(d)`` bytes (a row's scale included)."""
    return 2 * int(positions) * kv_heads * fmt.bytes_per_row(head_dim)


def check_crop(n, batch: int) -> np.ndarray:
    """``crop``'s argument: one length >= 0, or one per sequence (batch,)."""
    n = np.asarray(n)
    if n.ndim not in (0, 1) or (n.ndim == 1 and len(n) != batch) \
            or not np.issubdtype(n.dtype, np.integer) or (n < 0).any():
        raise ValueError(f"crop takes a length >= 0 or one per sequence ({batch}), got {n!r}")
    return n


def check_room(lengths: np.ndarray, counts: np.ndarray, max_len: int, rows=None) -> None:
    """CacheFullError naming the first sequence (``rows[i]``, or i) that counts[i] more tokens
    would take past ``max_len``."""
    over = np.flatnonzero(lengths + counts > max_len)
    if len(over):
        i = int(over[0])
        b = i if rows is None else rows[i]
        raise CacheFullError(f"sequence {b} holds {int(lengths[i])} tokens: {int(counts[i])} more "
                             f"would pass the cache's max_len of {max_len}")


def check_plan(plan: StepPlan, lengths: np.ndarray, expected: str) -> None:
    """A ValueError unless ``plan`` is a StepPlan of this cache's step: as many rows, and its
    ``expected`` lengths ("starts" before a contiguous layer writes, "ends" otherwise) equal to
    what the cache holds.  A plan reserved before a reorder, select or crop is refused before it
    writes anywhere."""
    if not isinstance(plan, StepPlan):
        raise TypeError(f"update and attend take the StepPlan that reserve(counts) returned, got "
                        f"{type(plan).__name__}")
    # (lists compared: np.array_equal costs ~10 us, twice per layer and step, a millisecond a token)
    if len(lengths) != plan.batch or lengths.tolist() != getattr(plan, expected).tolist():
        raise ValueError(f"the plan was reserved for {plan.batch} sequences of {getattr(plan, expected).tolist()} "
                         f"tokens, the cache holds {lengths.tolist()}: reserve the step again")


# ---------------------------------------------------------------------- the interface


class LayerCache(ABC):
    """One layer's keys and values for a batch of sequences: the interface the model sees (see the
    module doc).  Every member is abstract; the argument checks that reorder/select/crop share
    are the module's ``check_*`` functions, so every layout refuses the same bad input the same
    way."""

    @property
    @abstractmethod
    def batch(self) -> int:
        """Sequences now held."""

    @property
    @abstractmethod
    def capacity(self) -> int:
        """Sequences it has room for."""

    @property
    @abstractmethod
    def max_len(self) -> int:
        """Positions it has room for, per sequence."""

    @property
    @abstractmethod
    def lengths(self) -> np.ndarray:
        """(batch,) tokens cached per sequence (a read-only view)."""

    @abstractmethod
    def reserve(self, counts) -> StepPlan:
        """Check that counts[b] more tokens fit in row b and return the step's plan; an error
        (``CacheFullError``) leaves everything as it was."""

    @abstractmethod
    def update(self, k: np.ndarray, v: np.ndarray, plan: StepPlan) -> None:
        """Write the step's keys and values, k, v (N, G, d) packed as ``plan.offsets`` says."""

    @abstractmethod
    def attend(self, q: np.ndarray, plan: StepPlan) -> np.ndarray:
        """q (N, H, d): the step's queries, each against its row's first ``plan.ends[b]``
        positions, causally -> (N, H, d)."""

    @abstractmethod
    def reorder(self, beam_idx) -> None:
        """Row i becomes (a copy of) old row beam_idx[i], in place.  Indices may repeat (two beams
        with one parent) and the batch may grow up to ``capacity`` (expanding a prompt to beams).
        Rows that repeat a parent are copies: writing one never changes another."""

    @abstractmethod
    def select(self, rows) -> None:
        """Keep only the sequences ``rows`` (distinct), in that order, in place."""

    @abstractmethod
    def crop(self, n) -> None:
        """Forget every position >= n: one n for all rows, or one per row (batch,)."""

    @abstractmethod
    def keys(self, row: int) -> np.ndarray:
        """The keys of sequence ``row``: a new (G, lengths[row], d) array in the compute dtype."""

    @abstractmethod
    def values(self, row: int) -> np.ndarray:
        """The values of sequence ``row``: a new (G, lengths[row], d) array in the compute dtype."""

    @abstractmethod
    def copy(self) -> "LayerCache":
        """An independent copy."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes allocated."""

    @property
    @abstractmethod
    def used_bytes(self) -> int:
        """Bytes holding cached positions."""

    @property
    @abstractmethod
    def bytes_copied(self) -> int:
        """Bytes moved so far by reorder, select and copy-on-write."""


class ContiguousLayerCache(LayerCache):
    """Preallocated buffers [capacity, G, L_max, d], rows packed at the front.

    The first ``batch`` rows are the sequences held.  ``bytes_copied`` counts the bytes that
    reorder and select moved (the cost of beam search and of dropping finished sequences).
    """

    def __init__(self, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype="float32",
                 compute_dtype=np.float32, capacity: int | None = None):
        capacity = batch if capacity is None else capacity
        if not 1 <= batch <= capacity or max_len < 1:
            raise ValueError(f"a cache needs 1 <= batch ({batch}) <= capacity ({capacity}) and "
                             f"max_len >= 1 ({max_len})")
        self.format: CacheDtype = cache_dtype(dtype)
        if self.format.grouped:
            raise ValueError(f"an {self.format.name} cache keeps groups of tokens: it is "
                             "kvcache.quantized_cache's (new_cache('contiguous', ...) chooses it)")
        self.compute_dtype = np.dtype(compute_dtype)
        self._batch, self._capacity, self._max_len = batch, capacity, max_len
        self.kv_heads, self.head_dim = kv_heads, head_dim
        shape = (capacity, kv_heads, max_len, head_dim)
        self.k = np.zeros(shape, self.format.storage)              # [B, G, L_max, d]
        self.v = np.zeros(shape, self.format.storage)
        self.k_scale = np.zeros(shape[:3], np.float32) if self.format.scaled else None   # [B, G, L_max]
        self.v_scale = np.zeros(shape[:3], np.float32) if self.format.scaled else None
        self._lengths = np.zeros(capacity, np.int64)
        self._bytes_copied = 0

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
        """(batch,) tokens cached per sequence (a read-only view)."""
        view = self._lengths[: self._batch]
        view.flags.writeable = False
        return view

    @property
    def bytes_copied(self) -> int:
        return self._bytes_copied

    def reserve(self, counts) -> StepPlan:
        """The plan of a step of counts[b] new tokens for row b, checked against max_len."""
        counts = validate.step_counts(counts, self._batch)
        check_room(self.lengths, counts, self._max_len)
        return plan_step(counts, self.lengths)

    # ------------------------------------------------------------------ writing

    def _store(self, buf, scales, rows, x) -> None:
        """Write rows x (..., d) at ``rows`` (an index into buf) in the storage format."""
        if scales is None:
            buf[rows] = x                                       # (numpy casts to the storage dtype)
            return
        data, scale = self.format.encode(x)
        buf[rows] = data
        scales[rows] = scale

    def update(self, k: np.ndarray, v: np.ndarray, plan: StepPlan) -> None:
        """Write the step's positions: k, v (N, G, d) packed; row b's go to plan.starts[b] ..."""
        B = self._batch
        check_plan(plan, self._lengths[:B], "starts")              # (a plain view: only read)
        if plan.is_decode and B == 1:                           # one position: a plain index
            at = (0, slice(None), int(plan.starts[0]))          # [0, :, start] -> (G, d)
            self._store(self.k, self.k_scale, at, k[0])         # (numpy's fancy indexing costs
            self._store(self.v, self.v_scale, at, v[0])         # ~10 us a call, 60 times a token)
        elif plan.is_decode:                                    # one position per row
            at = (np.arange(B), slice(None), plan.starts)      # [b, :, starts[b]] -> (B, G, d)
            self._store(self.k, self.k_scale, at, k)
            self._store(self.v, self.v_scale, at, v)
        else:                                                   # prefill: counts[b] positions
            for b, (lo, hi) in enumerate(zip(plan.offsets[:-1].tolist(), plan.offsets[1:].tolist())):
                s = int(plan.starts[b])
                at = (b, slice(None), slice(s, s + hi - lo))    # (G, n, d)
                self._store(self.k, self.k_scale, at, k[lo:hi].transpose(1, 0, 2))
                self._store(self.v, self.v_scale, at, v[lo:hi].transpose(1, 0, 2))
        self._lengths[:B] = plan.ends

    # ------------------------------------------------------------------ reading

    def _read(self, buf, scales, rows, positions) -> np.ndarray:
        """Stored values back in the compute dtype (a view when the formats agree)."""
        data = buf[rows, :, positions]
        scale = None if scales is None else scales[rows, :, positions]
        return self.format.decode(data, scale, self.compute_dtype)

    def attend(self, q: np.ndarray, plan: StepPlan) -> np.ndarray:
        """q (N, H, d): the step's queries (their keys already written)  ->  (N, H, d)."""
        B = self._batch
        check_plan(plan, self._lengths[:B], "ends")                # (a plain view: only read)
        if plan.is_decode:                                      # one query per row
            T = plan.context
            K = self._read(self.k, self.k_scale, slice(0, B), slice(0, T))   # (B, G, T, d)
            V = self._read(self.v, self.v_scale, slice(0, B), slice(0, T))
            return decode_attention(q, K, V, plan.ends)
        out = np.empty_like(q)
        for b, (lo, hi) in enumerate(zip(plan.offsets[:-1].tolist(), plan.offsets[1:].tolist())):
            t = int(plan.ends[b])
            K = self._read(self.k, self.k_scale, b, slice(0, t))              # (G, t, d)
            V = self._read(self.v, self.v_scale, b, slice(0, t))
            out[lo:hi] = attend_new_tokens(q[lo:hi], K, V)
        return out

    def keys(self, row: int) -> np.ndarray:
        """The keys of sequence ``row``: a new (G, lengths[row], d) array in the compute dtype."""
        t = int(self.lengths[row])
        return np.array(self._read(self.k, self.k_scale, row, slice(0, t)))

    def values(self, row: int) -> np.ndarray:
        """The values of sequence ``row``: a new (G, lengths[row], d) array in the compute dtype."""
        t = int(self.lengths[row])
        return np.array(self._read(self.v, self.v_scale, row, slice(0, t)))

    # ------------------------------------------------------------------ rearranging rows

    def reorder(self, beam_idx) -> None:
        """Row i becomes a copy of old row beam_idx[i] (see ``LayerCache.reorder``)."""
        self._gather(check_reorder(beam_idx, self._batch, self._capacity))

    def select(self, rows) -> None:
        """Keep only the sequences ``rows`` (distinct), in that order, in place."""
        self._gather(check_select(rows, self._batch))

    def crop(self, n) -> None:
        """Forget every position >= n: one n for all rows, or one per row (batch,)."""
        n = check_crop(n, self._batch)
        np.minimum(self._lengths[: self._batch], n, out=self._lengths[: self._batch])

    def _gather(self, idx: np.ndarray) -> None:
        """Row i <- old row idx[i]; only rows whose source is another row are copied, and only
        their first max(lengths) positions."""
        moved = np.flatnonzero(idx != np.arange(len(idx)))
        if len(moved):
            src = idx[moved]
            T = int(self._lengths[src].max())
            # when no row read is a row written (beam search's rows: a parent's extra child goes
            # to the row of a parent without children), each row is copied straight to its place;
            # otherwise the sources go through a temporary first
            direct = not np.isin(src, moved).any()
            for buf in (self.k, self.v, self.k_scale, self.v_scale):
                if buf is not None:
                    if direct:
                        for dst, row in zip(moved.tolist(), src.tolist()):
                            buf[dst, :, :T] = buf[row, :, :T]
                    else:
                        # the right side is a copy (fancy indexing) taken before any row is written
                        buf[moved, :, :T] = buf[src, :, :T]
                    per_position = buf[0, :, 0].nbytes              # G rows of d values (or G scales)
                    self._bytes_copied += len(moved) * T * per_position
        self._lengths[: len(idx)] = self._lengths[idx]
        self._batch = len(idx)

    def copy(self) -> "ContiguousLayerCache":
        """An independent copy (new buffers)."""
        new = object.__new__(ContiguousLayerCache)
        new.__dict__.update(self.__dict__)
        for name in ("k", "v", "k_scale", "v_scale", "_lengths"):
            value = getattr(self, name)
            setattr(new, name, None if value is None else value.copy())
        return new

    # ------------------------------------------------------------------ bytes

    @property
    def nbytes(self) -> int:
        """Bytes allocated: capacity * G * L_max rows of keys and of values (scales included)."""
        return buffer_bytes(self.k, self.v, self.k_scale, self.v_scale)

    @property
    def used_bytes(self) -> int:
        """Bytes holding cached positions: sum(lengths) * G rows of keys and values."""
        return kv_bytes(self.lengths.sum(), self.kv_heads, self.format, self.head_dim)


class KVCache:
    """The caches of every layer of one model, with one set of sequences.

    ``cache[i]`` is layer i's ``LayerCache``.  ``reserve`` checks that a step fits before the
    model writes anything, so a step that does not fit fails with nothing half-done.
    """

    def __init__(self, layers: list[LayerCache], kind: str):
        self.layers = list(layers)
        self.kind = kind

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    def __iter__(self):
        return iter(self.layers)

    @property
    def batch(self) -> int:
        return self.layers[0].batch

    @property
    def capacity(self) -> int:
        return self.layers[0].capacity

    @property
    def max_len(self) -> int:
        return self.layers[0].max_len

    @property
    def lengths(self) -> np.ndarray:
        """(batch,) tokens cached per sequence (every layer holds the same)."""
        return self.layers[0].lengths

    @property
    def dtype(self) -> str:
        return self.layers[0].format.name

    def reserve(self, counts) -> StepPlan:
        """Check that counts[b] more tokens fit in row b, for every row, and return the step's
        plan, which every layer's ``update`` and ``attend`` then receive.

        Raises CacheFullError (naming the sequence) when one would pass ``max_len``; nothing
        changes."""
        return self.layers[0].reserve(counts)           # every layer holds the same lengths

    def reorder(self, beam_idx) -> None:
        """Every layer: row i <- old row beam_idx[i] (see LayerCache.reorder)."""
        for layer in self.layers:
            layer.reorder(beam_idx)

    def select(self, rows) -> None:
        """Every layer: keep the sequences ``rows`` only."""
        for layer in self.layers:
            layer.select(rows)

    def crop(self, n) -> None:
        """Every layer: forget positions >= n."""
        for layer in self.layers:
            layer.crop(n)

    def copy(self) -> "KVCache":
        return KVCache([layer.copy() for layer in self.layers], self.kind)

    @property
    def nbytes(self) -> int:
        """Bytes allocated by every layer."""
        return sum(layer.nbytes for layer in self.layers)

    @property
    def used_bytes(self) -> int:
        """Bytes holding cached tokens, every layer."""
        return sum(layer.used_bytes for layer in self.layers)

    @property
    def bytes_copied(self) -> int:
        """Bytes moved by reorder and select so far, every layer."""
        return sum(layer.bytes_copied for layer in self.layers)

    def as_dicts(self) -> list[dict]:
        """A copy in the plain form: one {"k", "v"} per layer, each (B, G, T, d) with T = max(lengths)
        and zeros beyond each sequence's length."""
        T = int(self.lengths.max()) if self.batch else 0
        out = []
        for layer in self.layers:
            G, d = layer.kv_heads, layer.head_dim
            entry = {}
            for name, read in (("k", layer.keys), ("v", layer.values)):
                arr = np.zeros((self.batch, G, T, d), layer.compute_dtype)
                for b in range(self.batch):
                    rows = read(b)
                    arr[b, :, : rows.shape[1]] = rows
                entry[name] = arr
            out.append(entry)
        return out


# ---------------------------------------------------------------------- the contiguous layout's factory


def contiguous_cache(n_layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int,
                     dtype="float32", compute_dtype=np.float32, capacity: int | None = None) -> KVCache:
    """One preallocated [capacity, G, max_len, d] buffer pair per layer (int4 and int2 are
    ``kvcache.quantized_cache.quantized_cache``'s; ``new_cache("contiguous", ...)`` chooses)."""
    return KVCache([ContiguousLayerCache(batch, kv_heads, head_dim, max_len, dtype, compute_dtype, capacity)
                    for _ in range(n_layers)], "contiguous")


# ---------------------------------------------------------------------- the plain form


def reorder_cache(cache: list[dict], beam_idx) -> list[dict]:
    """``KVCache.reorder`` on the plain form (``KVCache.as_dicts``, chapter 7's exercise): a new
    list of {"k", "v"} whose row i is a copy of old row beam_idx[i], in every layer.

    cache: one {"k": (B, G, T, d), "v": (B, G, T, d)} per layer; beam_idx: (B',) indices in
    0 .. B - 1, repeats allowed  ->  (B', G, T, d) arrays of the same dtype.  Indexing with an
    integer array copies, so no row shares memory with another or with the input.
    """
    idx = validate.index(beam_idx, len(cache[0]["k"]) if cache else 0, "beam index")
    return [{"k": layer["k"][idx], "v": layer["v"][idx]} for layer in cache]
