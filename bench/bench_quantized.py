"""bench_quantized: what an int4 or int2 cache costs a decode step, against float32, in one run.

``python -m bench quantized`` (or ``make bench``): one layer of SmolLM2's shape (3 key/value
heads of 64, 9 query heads) holding 4,096 cached positions of one sequence, in a float32, an
int4 and an int2 cache (``kvcache.quantized_cache``); the time of one decode step's attention
(write the new key and value, then attend), best of 7 rounds of 20 steps, the layouts
alternating, and the bytes each cache keeps, which is what a step reads.

The bytes fall 5.8 times from float32 to int4, but numpy cannot attend over packed codes: every
step unpacks them (shifts and masks), multiplies by the scales and adds the offsets, a pass over
T d numbers in float32 on top of the one attention makes.  On a CPU whose memory is not the
bottleneck at this size the decode step is slower, not faster; a GPU kernel that dequantizes in
registers as it reads (KIVI's) is what turns the saved bytes into time.  The machine is shared:
its load is printed; nothing is asserted.
"""
from __future__ import annotations

import os
import time

import numpy as np

G, H, D, T = 3, 9, 64, 4096
ROUNDS, STEPS = 7, 20


def _filled(dtype: str):
    from kvcache.layouts import new_cache
    kv = new_cache("contiguous", n_layers=1, batch=1, kv_heads=G, head_dim=D, max_len=T + ROUNDS * STEPS + 1,
                   dtype=dtype)
    rng = np.random.default_rng(0)
    plan = kv.reserve([T])
    kv[0].update(rng.standard_normal((T, G, D), dtype=np.float32), rng.standard_normal((T, G, D), dtype=np.float32),
                 plan)
    return kv


def _round(kv, rng) -> float:
    """STEPS decode steps of the one layer (write, attend), then the cache cropped back."""
    k = rng.standard_normal((1, G, D), dtype=np.float32)
    q = rng.standard_normal((1, H, D), dtype=np.float32)
    start = time.perf_counter()
    for _ in range(STEPS):
        plan = kv.reserve([1])
        kv[0].update(k, k, plan)
        kv[0].attend(q, plan)
    seconds = (time.perf_counter() - start) / STEPS
    kv.crop(T)
    return seconds


def main() -> int:
    print(f"load average {os.getloadavg()[0]:.2f}")
    caches = {dtype: _filled(dtype) for dtype in ("float32", "int4", "int2")}
    best = {dtype: float("inf") for dtype in caches}
    rng = np.random.default_rng(1)
    for _ in range(ROUNDS):
        for dtype, kv in caches.items():
            best[dtype] = min(best[dtype], _round(kv, rng))
    base = best["float32"]
    for dtype, kv in caches.items():
        kept = kv.used_bytes
        print(f"{dtype:8s} {kept:>12,} bytes kept ({caches['float32'].used_bytes / kept:4.1f}x fewer)   "
              f"decode step {best[dtype] * 1e3:7.3f} ms ({best[dtype] / base:4.1f}x float32's time)")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
