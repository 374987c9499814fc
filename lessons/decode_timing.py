"""What one decode step costs with and without a KV cache: counted and measured.

Counting convention: a multiply-add is 2 floating-point operations (FLOPs); only the
matrix products are counted.  The scaling by 1/sqrt(d) and the softmax add a few
operations per score (O(t)), which is small next to the 4 t d of the products.

One step for the newest token, which attends to t tokens (itself included)::

    with the cache     q, k, v of the new token      3 * 2 D d
                       scores K q and weights V       2 * 2 t d
    without a cache    q of the new token             2 D d
                       K and V of all t tokens        2 * 2 t D d
                       scores and weighted sum        2 * 2 t d

Generating n tokens one by one (t = 1 .. n) sums these: the projections are linear
in n with the cache and quadratic without; the attention itself (4 t d per step) is
quadratic in both, with a coefficient D times smaller than the recomputation's.

The measurements time chapter 2's own functions (``attend_step`` and
``step_without_cache``) with ``time.perf_counter``.  Each reports the fastest of a few
samples (other programs can only slow a sample down) and their median.  They depend on
the machine and on what else it is running; they are never asserted in tests.
"""
from __future__ import annotations

import time

import numpy as np

from .attention import (attend_step, decode_with_cache, init_params, prefill_with_cache,
                        step_without_cache)

__all__ = [
    "flops_cached_step",
    "flops_recompute_step",
    "flops_cached_total",
    "flops_recompute_total",
    "time_samples",
    "median_time",
    "best_time",
    "measure_steps",
    "measure_generation",
    "loglog_slope",
]


# ---------------------------------------------------------------- counted


def flops_cached_step(t, D, d):
    """FLOPs of one step with the cache: 6 D d + 4 t d (t tokens attended, itself included)."""
    return 6 * D * d + 4 * t * d


def flops_recompute_step(t, D, d):
    """FLOPs of one step recomputing K and V for the prefix: 2 D d + 4 t D d + 4 t d."""
    return 2 * D * d + 4 * t * D * d + 4 * t * d


def flops_cached_total(n, D, d):
    """Sum of flops_cached_step over t = 1..n: 6 D d n + 2 d n (n + 1)."""
    return 6 * D * d * n + 2 * d * n * (n + 1)


def flops_recompute_total(n, D, d):
    """Sum of flops_recompute_step over t = 1..n: 2 D d n + 2 (D + 1) d n (n + 1)."""
    return 2 * D * d * n + 2 * (D + 1) * d * n * (n + 1)


# ---------------------------------------------------------------- measured


def time_samples(fn, repeats=7, min_sample=2e-3, max_number=1000):
    """``repeats`` measurements of the wall time of one call of fn(), in seconds.

    Each sample runs fn enough times (``number``) to last at least ``min_sample`` seconds,
    so that short calls are not lost in the timer's resolution, and divides by ``number``.
    """
    fn()                                          # warm up (allocations, caches)
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-9)
    number = int(min(max_number, max(1, np.ceil(min_sample / once))))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return np.array(samples)


def median_time(fn, repeats=7, min_sample=2e-3):
    """Median of time_samples(fn): the typical time of one call, in seconds."""
    return float(np.median(time_samples(fn, repeats, min_sample)))


def best_time(fn, repeats=7, min_sample=2e-3):
    """Fastest of time_samples(fn): one call with the least interference, in seconds."""
    return float(np.min(time_samples(fn, repeats, min_sample)))


def measure_steps(lengths, D=64, d=64, repeats=7, seed=0):
    """Time one decode step at each context length t, with the cache and without.

    With the cache: attend_step on the newest token with a cache of t - 1 rows.
    Without: step_without_cache on the t hidden states (K and V recomputed).
    Returns a dict of arrays, seconds per step: "t", "cached_s", "recompute_s" (the fastest
    sample) and "cached_median_s", "recompute_median_s" (the median sample).
    """
    rng = np.random.default_rng(seed)
    p = init_params(D, d, rng)
    X = rng.normal(size=(max(lengths), D))
    _, full = prefill_with_cache(X, p)            # the keys and values of every token
    cached, recompute = [], []
    for t in lengths:
        cache = {"k": full["k"][:t - 1].copy(), "v": full["v"][:t - 1].copy()}
        x_t, prefix = X[t - 1], X[:t]
        cached.append(time_samples(lambda: attend_step(x_t, cache, p), repeats))
        recompute.append(time_samples(lambda: step_without_cache(prefix, p), repeats))
    return {"t": np.array(lengths),
            "cached_s": np.array([s.min() for s in cached]),
            "recompute_s": np.array([s.min() for s in recompute]),
            "cached_median_s": np.array([np.median(s) for s in cached]),
            "recompute_median_s": np.array([np.median(s) for s in recompute])}


def measure_generation(ns, D=64, d=64, repeats=3, seed=0):
    """Time generating n tokens one by one (t = 1 .. n), with the cache and without.

    Returns a dict of arrays: "n", "cached_s", "recompute_s" (seconds for all n steps,
    the fastest of ``repeats`` runs).
    """
    rng = np.random.default_rng(seed)
    p = init_params(D, d, rng)
    X = rng.normal(size=(max(ns), D))

    def without_cache(n):
        for t in range(1, n + 1):
            step_without_cache(X[:t], p)

    cached, recompute = [], []
    for n in ns:
        cached.append(best_time(lambda: decode_with_cache(X[:n], p), repeats, min_sample=0))
        recompute.append(best_time(lambda: without_cache(n), repeats, min_sample=0))
    return {"n": np.array(ns), "cached_s": np.array(cached), "recompute_s": np.array(recompute)}


def loglog_slope(x, y):
    """Slope of the least-squares line through (log x, log y): y ~ x**slope."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])
