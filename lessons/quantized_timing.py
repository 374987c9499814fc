"""What an int4 or int2 cache costs a decode step on a CPU, measured: chapter 13.

A decode step reads every cached key and value once: in a model of L layers with G key/value
heads of d numbers, at T cached positions, a float32 cache is 2 L G T d x 4 bytes and an int4
cache about 5.8 times fewer (codes, scales, offsets, the window).  If the step were bound by that
read, the int4 step would be faster.  In numpy it is not: numpy multiplies float32 numbers, not
packed 4-bit codes, so every step first **unpacks** the whole cache (a shift and a mask per code,
times the scale, plus the offset), writing a float32 copy of it, and then attends over that copy
as the float32 cache would.  The int4 step reads the codes, writes 2 L G T d x 4 bytes and reads
them again: it moves more bytes than the float32 step, not fewer.

``measure_step`` times it: one cache per layer of the model's shape, each holding T positions
of one sequence (random numbers: a step's time does not depend on the values it reads), and one
decode step of every layer's attention (write the new key and value, then attend), in float32
and in the quantized formats, the formats taking turns round after round (best of the rounds:
other programs can only slow a round down).  It also times the unpacking alone, the pass the
quantized step makes before it attends.  The machine is shared and its load is part of what a
page says beside these numbers; nothing here is ever asserted as a time.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from kvcache.cache import KVCache
from kvcache.layouts import new_cache

__all__ = ["StepTime", "positions_for", "filled_cache", "step_seconds", "unpack_seconds", "measure_step",
           "load_average"]


@dataclass(frozen=True)
class StepTime:
    """One cache format's decode step: the bytes the cache keeps (all read by the step) and the
    fastest step, and the fastest unpacking of the whole cache (0 for float32: nothing to unpack)."""

    dtype: str
    bytes_kept: int
    step_seconds: float
    unpack_seconds: float


def positions_for(available_bytes: int | None, layers: int, kv_heads: int, head_dim: int,
                  wanted: int = 4096, floor: int = 256) -> int:
    """The cached positions to measure at: ``wanted``, halved until the float32 cache (2 L G T d
    x 4 bytes) takes at most a quarter of the memory available (all of it when unknown), never
    below ``floor``."""
    T = wanted
    if available_bytes is not None:
        while T > floor and 4 * (2 * layers * kv_heads * head_dim * 4 * T) > available_bytes:
            T //= 2
    return T


def filled_cache(dtype: str, layers: int, kv_heads: int, head_dim: int, positions: int, spare: int, seed: int = 0):
    """A contiguous cache of ``dtype`` for one sequence: ``positions`` random positions in one
    layer, copied into every layer (each layer its own buffers), with room for ``spare`` more."""
    one = new_cache("contiguous", n_layers=1, batch=1, kv_heads=kv_heads, head_dim=head_dim,
                    max_len=positions + spare, dtype=dtype)
    rng = np.random.default_rng(seed)
    one[0].update(rng.standard_normal((positions, kv_heads, head_dim), dtype=np.float32),
                  rng.standard_normal((positions, kv_heads, head_dim), dtype=np.float32), one.reserve([positions]))
    return KVCache([one[0]] + [one[0].copy() for _ in range(layers - 1)], one.kind)


def step_seconds(kv, heads: int, steps: int, rng) -> float:
    """The mean time of ``steps`` decode steps of every layer's attention (write one key and
    value, attend one query of ``heads`` heads), then the cache cropped back to where it was."""
    T = int(kv.lengths[0])
    G, d = kv[0].kv_heads, kv[0].head_dim
    k = rng.standard_normal((1, G, d), dtype=np.float32)
    q = rng.standard_normal((1, heads, d), dtype=np.float32)
    start = time.perf_counter()
    for _ in range(steps):
        plan = kv.reserve([1])
        for layer in kv:
            layer.update(k, k, plan)
            layer.attend(q, plan)
    seconds = (time.perf_counter() - start) / steps
    kv.crop(T)
    return seconds


def unpack_seconds(kv) -> float:
    """The time to decode every layer's keys and values into float32, as a quantized cache's
    attention does first at each step (``_read``, the very call its attention makes)."""
    T = int(kv.lengths[0])
    start = time.perf_counter()
    for layer in kv:
        layer._read(layer.k, layer.k_scale, slice(0, 1), slice(0, T))
        layer._read(layer.v, layer.v_scale, slice(0, 1), slice(0, T))
    return time.perf_counter() - start


def measure_step(layers: int, kv_heads: int, heads: int, head_dim: int, positions: int,
                 dtypes=("float32", "int4"), rounds: int = 3, steps: int = 1) -> list[StepTime]:
    """``StepTime`` of each format: ``rounds`` rounds, each timing ``steps`` steps and one
    unpacking of every format in turn; the fastest of the rounds."""
    caches = {dtype: filled_cache(dtype, layers, kv_heads, head_dim, positions, steps + 1) for dtype in dtypes}
    best = {dtype: [float("inf"), float("inf")] for dtype in dtypes}
    rng = np.random.default_rng(1)
    for dtype, kv in caches.items():                          # a first step each: allocations, warm caches
        step_seconds(kv, heads, 1, rng)
    for _ in range(rounds):
        for dtype, kv in caches.items():
            best[dtype][0] = min(best[dtype][0], step_seconds(kv, heads, steps, rng))
            if dtype != "float32":
                best[dtype][1] = min(best[dtype][1], unpack_seconds(kv))
    return [StepTime(dtype, int(kv.used_bytes), best[dtype][0], 0.0 if dtype == "float32" else best[dtype][1])
            for dtype, kv in caches.items()]


def load_average() -> float:
    """The machine's load over the last minute (what else was running while we measured)."""
    return os.getloadavg()[0]
