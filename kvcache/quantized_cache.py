"""The contiguous cache in int4 or int2: keys per channel, values per token, codes packed.

Per layer, for ``capacity`` sequences of up to L_max positions, with g = ``group`` (``GROUP``
tokens unless told) and w = d b / 8 bytes of codes per row::

    k, v                 [B, G, F, w]  uint8   the codes of positions 0 .. F - 1, F = g floor(L_max / g)
    k_scale, k_offset    [B, G, F / g, d]      one per channel per group of g tokens (keys)
    v_scale, v_offset    [B, G, F]             one per token (values)
    k_window, v_window   [B, G, g, d]          the positions after the last full group, in the
                                                compute dtype: a channel's range needs a group of
                                                tokens, so the newest wait here until theirs fills

A sequence of length t holds its first g floor(t / g) positions as codes and the others in its
window.  When a write fills a group, the group is quantized (``kvcache.quantized``) and the
window starts again.  Attention decodes the codes to the compute dtype and lays the window over
them.  ``reorder`` and ``select`` move a row's codes, scales, offsets and window together;
``crop`` into a quantized group decodes that group back into the window (its full precision
is gone: what comes back is what the codes say).
"""
from __future__ import annotations

import numpy as np

from .cache import ContiguousLayerCache, KVCache, check_crop, check_plan
from .cache_dtypes import cache_dtype
from .plan import StepPlan
from .quantized import (dequantize_channels, dequantize_tokens, packed_width, quantize_channels,
                        quantize_tokens)

__all__ = ["GROUP", "QuantizedLayerCache", "quantized_cache"]

#: Tokens per group of the keys' per-channel scales (KIVI's group size, arXiv 2402.02750).
GROUP = 32

_ARRAYS = ("k", "v", "k_scale", "k_offset", "v_scale", "v_offset", "k_window", "v_window", "_lengths")


class QuantizedLayerCache(ContiguousLayerCache):
    """One layer's int4 or int2 cache (see the module doc): the contiguous interface, quantized
    storage."""

    def __init__(self, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype="int4",
                 compute_dtype=np.float32, capacity: int | None = None, group: int = GROUP):
        capacity = batch if capacity is None else capacity
        if not 1 <= batch <= capacity or max_len < 1 or group < 1:
            raise ValueError(f"a cache needs 1 <= batch ({batch}) <= capacity ({capacity}), max_len >= 1 "
                             f"({max_len}) and group >= 1 ({group})")
        self.format = cache_dtype(dtype)
        if not self.format.grouped:
            raise ValueError(f"a quantized cache stores int4 or int2, not {self.format.name}")
        self.compute_dtype = np.dtype(compute_dtype)
        self._batch, self._capacity, self._max_len = batch, capacity, max_len
        self.kv_heads, self.head_dim, self.group = kv_heads, head_dim, int(group)
        self.bits = self.format.bits
        width = packed_width(head_dim, self.bits)
        groups = max_len // self.group
        full = groups * self.group
        self.k = np.zeros((capacity, kv_heads, full, width), np.uint8)
        self.v = np.zeros((capacity, kv_heads, full, width), np.uint8)
        self.k_scale = np.zeros((capacity, kv_heads, groups, head_dim), np.float32)
        self.k_offset = np.zeros((capacity, kv_heads, groups, head_dim), np.float32)
        self.v_scale = np.zeros((capacity, kv_heads, full), np.float32)
        self.v_offset = np.zeros((capacity, kv_heads, full), np.float32)
        self.k_window = np.zeros((capacity, kv_heads, self.group, head_dim), self.compute_dtype)
        self.v_window = np.zeros((capacity, kv_heads, self.group, head_dim), self.compute_dtype)
        self._lengths = np.zeros(capacity, np.int64)
        self._bytes_copied = 0

    # ------------------------------------------------------------------ writing

    def update(self, k: np.ndarray, v: np.ndarray, plan: StepPlan) -> None:
        """Write the step's positions (k, v (N, G, d) packed): into each row's window, and every
        group that fills into codes."""
        B = self._batch
        check_plan(plan, self._lengths[:B], "starts")
        offsets, starts = plan.offsets.tolist(), plan.starts.tolist()
        for b in range(B):
            lo, hi = offsets[b], offsets[b + 1]
            self._append(b, starts[b], k[lo:hi].transpose(1, 0, 2), v[lo:hi].transpose(1, 0, 2))
        self._lengths[:B] = plan.ends

    def _append(self, row: int, start: int, keys: np.ndarray, values: np.ndarray) -> None:
        """Positions start .. start + n - 1 of ``row``: keys, values (G, n, d)."""
        g = self.group
        first = (start // g) * g                     # the window holds first .. start - 1
        for is_key, x in ((True, keys), (False, values)):
            window = self.k_window if is_key else self.v_window
            span = np.concatenate([window[row, :, : start - first], x.astype(self.compute_dtype)], axis=1)
            groups = span.shape[1] // g
            if groups:
                self._write_groups(is_key, row, first, span[:, : groups * g])
            rest = span[:, groups * g:]
            window[row, :, : rest.shape[1]] = rest

    def _write_groups(self, is_key: bool, row: int, first: int, x: np.ndarray) -> None:
        """Quantize whole groups x (G, n g, d) of ``row`` starting at position ``first``."""
        G, n, d = x.shape
        g = self.group
        at = slice(first, first + n)
        if is_key:
            codes, scale, offset = quantize_channels(x.reshape(G, n // g, g, d), self.bits)
            self.k[row, :, at] = codes.reshape(G, n, -1)
            self.k_scale[row, :, first // g: (first + n) // g] = scale
            self.k_offset[row, :, first // g: (first + n) // g] = offset
        else:
            codes, scale, offset = quantize_tokens(x, self.bits)
            self.v[row, :, at], self.v_scale[row, :, at], self.v_offset[row, :, at] = codes, scale, offset

    # ------------------------------------------------------------------ reading

    def _decode(self, is_key: bool, rows, full: int) -> np.ndarray:
        """Positions 0 .. full - 1 (whole groups) of ``rows`` decoded: (n, G, full, d)."""
        g, G, d = self.group, self.kv_heads, self.head_dim
        if is_key:
            codes = self.k[rows, :, :full].reshape(len(rows), G, full // g, g, -1)
            out = dequantize_channels(codes, self.k_scale[rows, :, : full // g],
                                      self.k_offset[rows, :, : full // g], self.bits, self.compute_dtype)
            return out.reshape(len(rows), G, full, d)
        return dequantize_tokens(self.v[rows, :, :full], self.v_scale[rows, :, :full],
                                 self.v_offset[rows, :, :full], self.bits, self.compute_dtype)

    def _read(self, buf, scales, rows, positions) -> np.ndarray:
        """Positions 0 .. T - 1 of ``rows`` (an int or a slice) in the compute dtype: the codes of
        the full groups decoded, each row's window laid over them, zeros after."""
        is_key = buf is self.k
        single = not isinstance(rows, slice)
        row_list = [int(rows)] if single else list(range(*rows.indices(self._capacity)))
        T = positions.stop
        full = (T // self.group) * self.group
        out = np.zeros((len(row_list), self.kv_heads, T, self.head_dim), self.compute_dtype)
        if full:
            out[:, :, :full] = self._decode(is_key, row_list, full)
        window = self.k_window if is_key else self.v_window
        for i, row in enumerate(row_list):
            length = min(int(self._lengths[row]), T)
            first = (length // self.group) * self.group
            out[i, :, first:length] = window[row, :, : length - first]
        return out[0] if single else out

    # ------------------------------------------------------------------ rearranging rows

    def crop(self, n) -> None:
        """Forget every position >= n; a row cut inside a quantized group gets that group's
        remaining positions back in its window, decoded."""
        B, g = self._batch, self.group
        n = check_crop(n, B)
        new = np.minimum(self._lengths[:B], n)
        for row in np.flatnonzero(new < self._lengths[:B]).tolist():
            length, old = int(new[row]), int(self._lengths[row])
            first = (length // g) * g
            if length > first and first + g <= (old // g) * g:          # cut inside a quantized group
                for is_key, window in ((True, self.k_window), (False, self.v_window)):
                    group = self._decode_group(is_key, row, first)
                    window[row, :, : length - first] = group[:, : length - first]
        self._lengths[:B] = new

    def _decode_group(self, is_key: bool, row: int, first: int) -> np.ndarray:
        """The quantized group of ``row`` starting at ``first``, decoded: (G, g, d)."""
        g = self.group
        if is_key:
            k = first // g
            return dequantize_channels(self.k[row, :, first: first + g], self.k_scale[row, :, k],
                                       self.k_offset[row, :, k], self.bits, self.compute_dtype)
        at = slice(first, first + g)
        return dequantize_tokens(self.v[row, :, at], self.v_scale[row, :, at], self.v_offset[row, :, at],
                                 self.bits, self.compute_dtype)

    def _gather(self, idx: np.ndarray) -> None:
        """Row i <- old row idx[i]: codes, scales, offsets and window move together; only the
        rows whose source is another row, and only their groups in use, are copied."""
        moved = np.flatnonzero(idx != np.arange(len(idx)))
        if len(moved):
            src = idx[moved]
            T = int(self._lengths[src].max())
            full = (T // self.group) * self.group
            reach = {"k": full, "v": full, "v_scale": full, "v_offset": full,
                     "k_scale": full // self.group, "k_offset": full // self.group}
            for name in _ARRAYS[:-1]:
                buf = getattr(self, name)
                part = slice(None) if name.endswith("window") else slice(0, reach[name])
                rows = buf[src, :, part]                     # (a copy, taken before any row is written)
                buf[moved, :, part] = rows
                self._bytes_copied += rows.nbytes
        self._lengths[: len(idx)] = self._lengths[idx]
        self._batch = len(idx)

    def copy(self) -> "QuantizedLayerCache":
        """An independent copy (new buffers)."""
        new = object.__new__(QuantizedLayerCache)
        new.__dict__.update(self.__dict__)
        for name in _ARRAYS:
            setattr(new, name, getattr(self, name).copy())
        return new

    # ------------------------------------------------------------------ bytes

    @property
    def nbytes(self) -> int:
        """Bytes allocated: codes, scales, offsets and windows of every row."""
        return sum(getattr(self, name).nbytes for name in _ARRAYS[:-1])

    @property
    def used_bytes(self) -> int:
        """Bytes holding cached positions: ``CacheDtype.sequence_bytes`` per row and head."""
        itemsize = self.compute_dtype.itemsize
        return self.kv_heads * sum(self.format.sequence_bytes(int(t), self.head_dim, self.group, itemsize)
                                   for t in self.lengths)


def quantized_cache(n_layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype="int4",
                    compute_dtype=np.float32, capacity: int | None = None, group: int = GROUP) -> KVCache:
    """The contiguous layout in int4 or int2: one ``QuantizedLayerCache`` per layer."""
    return KVCache([QuantizedLayerCache(batch, kv_heads, head_dim, max_len, dtype, compute_dtype, capacity, group)
                    for _ in range(n_layers)], "contiguous")
