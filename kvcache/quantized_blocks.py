"""The paged cache in int4 or int2: a block is the group, quantized when it fills.

A paged pool's block holds ``block_size`` = g positions; in int4 or int2 it holds them as codes
(the pool's ``k`` and ``v`` arrays, [num_blocks, g, G, w] uint8, w = d b / 8) with, per layer::

    k_scale, k_offset    [num_blocks, G, d]     one per channel of the block's g tokens (keys)
    v_scale, v_offset    [num_blocks, g, G]     one per token (values)

A block that is not yet full keeps its positions in a window of the compute dtype,
``k_window[layer][window_of[block]]`` ([g, G, d]); when a write fills the block, the window's
positions and the new ones are quantized together and the window is given back.  At most one
block per sequence is partly filled, so the windows are few: they are handed out from a list
that grows when every one is taken.

The rules that keep every reader right, whatever the sharing:

* a sequence reads its full blocks from the codes and its partly filled last block from that
  block's window (a block is never written while another sequence holds it: copy-on-write);
* ``prepare`` (before a step's first layer writes) gives a window to every block the step
  leaves partly filled, and takes back the windows of blocks filled since, or freed;
* ``copy_block`` (copy-on-write) copies a partly filled block's window with it;
* a crop that leaves a quantized block partly filled decodes it into a window (``reopen``).
"""
from __future__ import annotations

import numpy as np

from .quantized import dequantize_kv, dequantize_tokens, quantize_channels, quantize_tokens, unpack_codes

__all__ = ["QuantizedBlocks"]


class QuantizedBlocks:
    """The scales, offsets and windows of a pool's int4 or int2 blocks (see the module doc)."""

    def __init__(self, n_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 bits: int, compute_dtype):
        self.n_layers, self.block_size, self.bits = n_layers, block_size, bits
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.compute_dtype = np.dtype(compute_dtype)
        per_channel = (num_blocks, kv_heads, head_dim)
        per_token = (num_blocks, block_size, kv_heads)
        self.k_scale = [np.zeros(per_channel, np.float32) for _ in range(n_layers)]
        self.k_offset = [np.zeros(per_channel, np.float32) for _ in range(n_layers)]
        self.v_scale = [np.zeros(per_token, np.float32) for _ in range(n_layers)]
        self.v_offset = [np.zeros(per_token, np.float32) for _ in range(n_layers)]
        self.window_of = np.full(num_blocks, -1, np.int64)
        empty = (0, block_size, kv_heads, head_dim)
        self.k_window = [np.zeros(empty, self.compute_dtype) for _ in range(n_layers)]
        self.v_window = [np.zeros(empty, self.compute_dtype) for _ in range(n_layers)]
        self._free_windows: list[int] = []
        self._filled: set[int] = set()            # blocks filled by the last step: windows to give back

    # ------------------------------------------------------------------ windows

    def _take_window(self, block: int) -> int:
        if self.window_of[block] >= 0:
            return int(self.window_of[block])
        if not self._free_windows:                # every window taken: twice as many
            n = len(self.k_window[0])
            grow = max(4, n)
            for windows in (self.k_window, self.v_window):
                for i, w in enumerate(windows):
                    windows[i] = np.concatenate([w, np.zeros((grow,) + w.shape[1:], w.dtype)])
            self._free_windows = list(range(n + grow - 1, n - 1, -1))
        slot = self._free_windows.pop()
        self.window_of[block] = slot
        return slot

    def _give_back(self, block: int) -> None:
        slot = int(self.window_of[block])
        if slot >= 0:
            self._free_windows.append(slot)
            self.window_of[block] = -1

    def prepare(self, blocks: np.ndarray, slots: np.ndarray, refcount) -> None:
        """Before a step writes slot slots[i] of block blocks[i] (in position order): windows
        given back for blocks filled by the last step or freed since (``refcount(b) == 0``), and a
        window for every block this step leaves partly filled."""
        for b in np.flatnonzero(self.window_of >= 0).tolist():
            if b in self._filled or refcount(b) == 0:
                self._give_back(b)
        self._filled = set()
        last = {}
        for b, s in zip(blocks.tolist(), slots.tolist()):
            last[b] = s                                     # the highest slot written (in order)
        for b, s in last.items():
            if s < self.block_size - 1:
                self._take_window(b)
            elif self.window_of[b] >= 0:
                self._filled.add(b)

    def reopen(self, block: int, codes_k: list, codes_v: list) -> None:
        """A quantized block about to be partly filled again (a crop): its positions decoded
        into a window, every layer (what the codes say: the full precision is gone)."""
        if self.window_of[block] >= 0 and block not in self._filled:
            return                                          # partly filled already: its window holds it
        self._filled.discard(block)
        w = self._take_window(block)
        for layer in range(self.n_layers):
            self.k_window[layer][w] = self._decode_block(layer, True, codes_k[layer], block)
            self.v_window[layer][w] = self._decode_block(layer, False, codes_v[layer], block)

    def copy_block(self, src: int, dst: int, slots: int) -> None:
        """Copy-on-write: block ``dst`` gets ``src``'s scales, and its window when it has one."""
        for arrs in (self.k_scale, self.k_offset, self.v_scale, self.v_offset):
            for a in arrs:
                a[dst] = a[src]
        if self.window_of[src] >= 0:
            w_src, w_dst = int(self.window_of[src]), self._take_window(dst)
            for windows in (self.k_window, self.v_window):
                for w in windows:
                    w[w_dst, :slots] = w[w_src, :slots]

    # ------------------------------------------------------------------ one layer's writes and reads

    def write(self, layer: int, codes_k: np.ndarray, codes_v: np.ndarray, blocks: np.ndarray,
              slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Layer ``layer``'s new positions, k, v (N, G, d), at blocks[i], slots[i] (in position
        order, a block's slots consecutive): into the block's window, or, for a block the
        write fills, quantized with the window's earlier positions into the codes."""
        bs = self.block_size
        blocks, slots = blocks.tolist(), slots.tolist()
        i, N = 0, len(blocks)
        while i < N:
            b, first = blocks[i], slots[i]
            j = i + 1
            while j < N and blocks[j] == b:
                j += 1
            end = slots[j - 1] + 1
            for is_key, x, codes in ((True, k, codes_k), (False, v, codes_v)):
                windows = (self.k_window if is_key else self.v_window)[layer]
                if end == bs:
                    whole = x[i:j].astype(self.compute_dtype)
                    if first:
                        whole = np.concatenate([windows[self.window_of[b], :first], whole])
                    self._quantize_block(layer, is_key, codes, b, whole)
                else:
                    windows[self.window_of[b], first:end] = x[i:j]
            i = j

    def _quantize_block(self, layer: int, is_key: bool, codes: np.ndarray, block: int, x: np.ndarray) -> None:
        """x (g, G, d): a full block, keys per channel over its g tokens, values per token."""
        if is_key:
            packed, scale, offset = quantize_channels(x.transpose(1, 0, 2), self.bits)   # (G, g, w)
            codes[block] = packed.transpose(1, 0, 2)
            self.k_scale[layer][block], self.k_offset[layer][block] = scale, offset
        else:
            packed, scale, offset = quantize_tokens(x, self.bits)                        # (g, G, w)
            codes[block] = packed
            self.v_scale[layer][block], self.v_offset[layer][block] = scale, offset

    def _decode_block(self, layer: int, is_key: bool, codes: np.ndarray, block: int) -> np.ndarray:
        """One block's codes decoded: (g, G, d)."""
        table = np.array([[block]])
        return self.read(layer, is_key, codes, table, self.block_size, None)[0]

    def read(self, layer: int, is_key: bool, codes: np.ndarray, table: np.ndarray, T: int,
             lengths) -> np.ndarray:
        """Positions 0 .. T - 1 of the sequences whose tables are ``table`` (B, n): the codes of
        every block decoded, then each sequence's partly filled last block (``lengths[r] % g``
        positions) from its window.  -> (B, T, G, d) in the compute dtype."""
        B, n = table.shape
        bs, G, d = self.block_size, self.kv_heads, self.head_dim
        gathered = np.take(codes, table, axis=0)                                # (B, n, g, G, w)
        if is_key:
            scale, offset = self.k_scale[layer][table], self.k_offset[layer][table]   # (B, n, G, d)
            values = dequantize_kv(unpack_codes(gathered, self.bits), scale[:, :, None], offset[:, :, None])
        else:
            values = dequantize_tokens(gathered, self.v_scale[layer][table], self.v_offset[layer][table],
                                       self.bits, np.float32)
        out = np.asarray(values, self.compute_dtype).reshape(B, n * bs, G, d)[:, :T]
        if lengths is not None:
            windows = (self.k_window if is_key else self.v_window)[layer]
            for r, length in enumerate(np.asarray(lengths).tolist()):
                part = length % bs
                if part and length <= T:
                    first = length - part
                    out[r, first:length] = windows[self.window_of[table[r, first // bs]], :part]
        return out

    # ------------------------------------------------------------------ bytes

    @property
    def nbytes(self) -> int:
        """Bytes of the scales, offsets and windows (the codes are the pool's)."""
        return sum(a.nbytes for arrs in (self.k_scale, self.k_offset, self.v_scale, self.v_offset,
                                         self.k_window, self.v_window) for a in arrs)

    def block_bytes(self, filled: int) -> int:
        """Bytes a block with ``filled`` positions keeps in one layer: a full one its codes and
        scales, a partly filled one its positions in the window."""
        G, d, bs = self.kv_heads, self.head_dim, self.block_size
        if filled < bs:
            return 2 * filled * G * d * self.compute_dtype.itemsize
        codes = bs * G * d * self.bits // 8
        return (codes + 2 * G * d * 4) + (codes + 2 * bs * G * 4)

    def copy(self) -> "QuantizedBlocks":
        new = object.__new__(QuantizedBlocks)
        new.__dict__.update(self.__dict__)
        for name in ("k_scale", "k_offset", "v_scale", "v_offset", "k_window", "v_window"):
            setattr(new, name, [a.copy() for a in getattr(self, name)])
        new.window_of = self.window_of.copy()
        new._free_windows = list(self._free_windows)
        new._filled = set(self._filled)
        return new
