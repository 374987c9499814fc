"""Measure, on this machine, how fast memory moves and how fast a decode step reads its cache.

Two measurements, both with numpy on the CPU:

* ``copy_bandwidth``: copy a large array (256 MiB by default) and count the bytes read plus the
  bytes written, divided by the time of the copy (median of a few repeats).  This is about the
  best a plain numpy program can move data through main memory.
* ``measure_decode_attention``: one decode step of attention, one query of width d against
  cached K and V of T tokens, for caches from 1 MiB to well beyond the last-level cache.  Its
  time against the cache's bytes gives the bandwidth the step achieves.

Nothing here asserts a speed: the numbers belong to the machine that ran it.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from .decode_timing import median_time
from .memory import MIB

__all__ = [
    "CacheLevel", "cpu_caches", "last_level_cache_bytes",
    "CopyMeasurement", "copy_bandwidth",
    "decode_attention", "StepMeasurement", "measure_decode_attention", "achieved_bandwidth_beyond",
]

@dataclass(frozen=True)
class CacheLevel:
    level: int
    kind: str
    size_bytes: int


def _parse_size(text: str) -> int:
    text = text.strip()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def cpu_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> list[CacheLevel]:
    """The CPU caches of core 0 as Linux reports them (empty list where it does not)."""
    levels = []
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith("index"))
    except OSError:
        return []
    for name in names:
        try:
            with open(os.path.join(root, name, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, name, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, name, "size")) as f:
                size = _parse_size(f.read())
        except (OSError, ValueError):
            continue
        levels.append(CacheLevel(level, kind, size))
    return levels


def last_level_cache_bytes() -> int | None:
    """Size of the largest (last-level) data or unified cache, or None if unknown."""
    data = [c for c in cpu_caches() if c.kind in ("Data", "Unified")]
    if not data:
        return None
    return max(data, key=lambda c: c.level).size_bytes


@dataclass(frozen=True)
class CopyMeasurement:
    """A timed ``np.copyto`` of ``nbytes`` bytes: ``2 * nbytes`` moved (read + write)."""

    nbytes: int
    seconds: tuple[float, ...]

    @property
    def bytes_moved(self) -> int:
        return 2 * self.nbytes

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def bandwidth(self) -> float:
        """Bytes per second: (bytes read + bytes written) / median time."""
        return self.bytes_moved / self.median_seconds


def copy_bandwidth(nbytes: int = 256 * MIB, repeats: int = 5) -> CopyMeasurement:
    """Time copying one array of ``nbytes`` bytes into another, ``repeats`` times after a warm-up."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: the first touch of ``dst`` also maps its pages
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        seconds.append(time.perf_counter() - start)
    return CopyMeasurement(src.nbytes, tuple(seconds))


def decode_attention(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """One decode step of attention for one head: softmax(K q / sqrt(d)) V.

    ``q`` has shape (d,), ``K`` and ``V`` shape (T, d).  Reads all of K and V once.  The two
    products use ``np.einsum``, which runs on one thread, like the copy of ``copy_bandwidth``
    (numpy's ``@`` calls a BLAS library that may use several threads).
    """
    scores = np.einsum("td,d->t", K, q)
    scores *= 1.0 / math.sqrt(q.shape[0])
    scores -= scores.max()
    np.exp(scores, out=scores)
    scores /= scores.sum()
    return np.einsum("t,td->d", scores, V)


@dataclass(frozen=True)
class StepMeasurement:
    """The median time of one decode step over a cache of ``n_tokens`` tokens."""

    n_tokens: int
    head_dim: int
    itemsize: int
    seconds: float

    @property
    def cache_bytes(self) -> int:
        """Bytes of K and V together: 2 * T * d * itemsize."""
        return 2 * self.n_tokens * self.head_dim * self.itemsize

    @property
    def bandwidth(self) -> float:
        """Cache bytes read per second (the query, scores and output are not counted)."""
        return self.cache_bytes / self.seconds


def measure_decode_attention(cache_mib=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), head_dim: int = 128,
                             dtype=np.float32, repeats: int = 5, min_seconds: float = 0.01,
                             seed: int = 0) -> list[StepMeasurement]:
    """Time ``decode_attention`` for caches (K and V together) of each size in ``cache_mib``.

    One pair of K, V arrays for the largest size is filled once with random numbers (fixed
    seed); each smaller cache is its first T rows.  float32 by default: numpy has no fast
    float16 matrix-vector product, and a byte is a byte whichever type fills it.
    """
    dtype = np.dtype(dtype)
    per_token = 2 * head_dim * dtype.itemsize
    sizes = sorted(int(m * MIB) // per_token for m in cache_mib)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(head_dim).astype(dtype)
    # uniform numbers: the fastest to draw, and a step's time does not depend on the values
    K_all = rng.random((sizes[-1], head_dim), dtype=np.float32).astype(dtype, copy=False)
    V_all = rng.random((sizes[-1], head_dim), dtype=np.float32).astype(dtype, copy=False)
    out = []
    for t in sizes:
        K, V = K_all[:t], V_all[:t]
        seconds = median_time(lambda: decode_attention(q, K, V), repeats, min_sample=min_seconds)
        out.append(StepMeasurement(t, head_dim, dtype.itemsize, seconds))
    return out


def achieved_bandwidth_beyond(steps: list[StepMeasurement], threshold_bytes: int) -> float:
    """Median bandwidth of the steps whose cache is at least ``threshold_bytes``."""
    chosen = [s.bandwidth for s in steps if s.cache_bytes >= threshold_bytes]
    if not chosen:
        raise ValueError("no measurement is that large")
    return statistics.median(chosen)
