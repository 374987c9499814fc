"""How the cache stores a key or value row: float64, float32, float16, bfloat16, int8 with a scale
per row, or int4 and int2 codes with keys per channel and values per token.

A "row" is the d numbers of one head at one position: the unit the cache writes at every step.

* float32, float64: stored as computed.
* float16 (the mixed precision of serving engines): 2 bytes a value.  Rounding to the nearest
  float16 has a relative error of at most 2**-11 (about 4.9e-4) for |x| between 2**-14 and 65504.
* bfloat16 (``ml_dtypes``; float32's top 16 bits): 2 bytes a value, float32's range, a relative
  error of at most 2**-8 (about 3.9e-3).
* int8 with a scale per row: 1 byte a value plus one float32 scale for the d values of the row::

      s = max_i |x_i| / 127,    q_i = round(x_i / s)  in [-127, 127],    x_i ~ s q_i

  so |x_i - s q_i| <= s / 2 = max|x| / 254: the error is relative to the row's largest entry, not
  to each entry.  A row of zeros gets s = 0 and decodes to zeros.

* int4 and int2 (KIVI's layout, arXiv 2402.02750; the quantizer is ``kvcache.quantized``):
  b-bit codes, 8 / b to a byte, with an offset and a scale (float32) per slice.  Keys are
  quantized per channel over a group of ``g`` tokens (the statistics of a channel need several
  tokens: one scale and offset per channel per group), values per token (one per row).  The
  positions after the last full group, at most g - 1 of them, wait in the compute dtype (the
  full-precision window) until their group fills.  A sequence of t positions keeps, per head::

      f = g floor(t / g) quantized positions, r = t - f in the window:
      keys    f d b / 8  +  (f / g) 2 d 4  +  r d c      bytes        (c: the compute dtype's size)
      values  f d b / 8  +  f 2 4          +  r d c

  (``CacheDtype.sequence_bytes``).  The contiguous cache takes groups of
  ``kvcache.quantized_cache.GROUP`` tokens; the paged one quantizes a block when it fills.

The cache decodes to the model's compute dtype before attending (numpy has no fast float16 or int8
matrix product), so only the storage shrinks; a bfloat16 row widens by a shift of its bits
(``kvcache.half.widen``).  The error each format costs is measured in ``bench_engine`` and
bounded in the tests, and on the real model in ``lessons.precision``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .half import bfloat16, widen

__all__ = ["CacheDtype", "CACHE_DTYPES", "cache_dtype", "quantize_rows", "dequantize_rows"]


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes and one scale per row: x (..., d) -> (q (..., d) int8, s (...,) float32).

    s = max|x| / 127 over the last axis; q = round(x / s), so |x - s q| <= s / 2.
    """
    amax = np.max(np.abs(x), axis=-1)                          # (...,)
    scale = (amax / 127.0).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0).astype(x.dtype)     # a zero row: any divisor gives q = 0
    q = np.rint(x / safe[..., None])
    return np.clip(q, -127, 127).astype(np.int8), scale


def dequantize_rows(q: np.ndarray, scale: np.ndarray, dtype) -> np.ndarray:
    """s q: int8 codes (..., d) and scales (...,) back to ``dtype`` (..., d)."""
    return q.astype(dtype) * scale[..., None].astype(dtype)


@dataclass(frozen=True)
class CacheDtype:
    """A storage format: numpy's storage dtype and whether rows carry a scale."""

    name: str
    storage: np.dtype
    scaled: bool = False
    bits: int = 0                 # int4, int2: the bits of a code (grouped: keys per channel, values per token)

    @property
    def grouped(self) -> bool:
        """Codes of fewer than 8 bits, keys per channel over a group of tokens (int4, int2)."""
        return self.bits > 0

    def sequence_bytes(self, length: int, head_dim: int, group: int, compute_itemsize: int) -> int:
        """Bytes one head keeps for ``length`` positions, keys and values (the module's formula for
        int4 and int2; 2 length rows otherwise)."""
        if not self.grouped:
            return 2 * length * self.bytes_per_row(head_dim)
        full = (length // group) * group
        window = (length - full) * head_dim * compute_itemsize
        codes = full * head_dim * self.bits // 8
        return (codes + (full // group) * 2 * head_dim * 4 + window) + (codes + full * 2 * 4 + window)

    def bytes_per_row(self, head_dim: int) -> int:
        """Bytes one row (d values) takes, its scale included (int4, int2: the codes alone;
        their scales and window are counted by ``sequence_bytes``)."""
        if self.grouped:
            return head_dim * self.bits // 8
        return head_dim * self.storage.itemsize + (4 if self.scaled else 0)

    def _row_format(self) -> None:
        if self.grouped:
            raise TypeError(f"{self.name} keys are quantized per channel over groups of tokens: rows are not "
                            "encoded one by one (the layouts keep them, kvcache.quantized_cache)")

    def encode(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows x (..., d) in the compute dtype -> (stored values, scales or None)."""
        self._row_format()
        if self.scaled:
            return quantize_rows(x)
        return x.astype(self.storage, copy=False), None

    def decode(self, data: np.ndarray, scale: np.ndarray | None, dtype) -> np.ndarray:
        """Stored rows back to ``dtype`` (a view, with no copy, when nothing needs converting)."""
        self._row_format()
        if self.scaled:
            return dequantize_rows(data, scale, dtype)
        if data.dtype == bfloat16 and np.dtype(dtype) == np.float32:
            return widen(data)
        return data.astype(dtype, copy=False)


CACHE_DTYPES = {
    "float64": CacheDtype("float64", np.dtype(np.float64)),
    "float32": CacheDtype("float32", np.dtype(np.float32)),
    "float16": CacheDtype("float16", np.dtype(np.float16)),
    "bfloat16": CacheDtype("bfloat16", bfloat16),
    "int8": CacheDtype("int8", np.dtype(np.int8), scaled=True),
    "int4": CacheDtype("int4", np.dtype(np.uint8), bits=4),
    "int2": CacheDtype("int2", np.dtype(np.uint8), bits=2),
}


def cache_dtype(name) -> CacheDtype:
    """The format called ``name`` ("float64", "float32", "float16", "bfloat16", "int8", "int4",
    "int2"; numpy dtypes accepted)."""
    if isinstance(name, CacheDtype):
        return name
    if isinstance(name, str):
        key = name
    else:
        try:
            key = np.dtype(name).name
        except TypeError:
            key = repr(name)
    if key not in CACHE_DTYPES:
        raise ValueError(f"cache dtype {name!r} is not one of {', '.join(CACHE_DTYPES)}")
    return CACHE_DTYPES[key]
