"""The cache layouts by name: what ``cache=`` chooses (``Model.new_cache``, ``generate.greedy``).

    contiguous   ``kvcache.cache.contiguous_cache``: one preallocated buffer pair per layer
                 (int4, int2: ``kvcache.quantized_cache.quantized_cache``, codes and a window)
    paged        ``kvcache.paged.paged_cache``: fixed-size blocks from one pool, with block tables
    window       ``kvcache.window.window_cache``: a ring buffer of ``sinks`` + ``window`` slots (window=W, sinks=S)
    h2o          ``kvcache.h2o.h2o_cache``: ``budget`` slots, the ``recent`` newest kept, the rest by
                 accumulated attention (budget=B, recent=R)

A layout is a factory ``factory(n_layers, batch, kv_heads, head_dim, max_len, dtype, compute_dtype,
capacity, **options) -> KVCache``; another is added with ``register_cache(name)``.  The table lives
here, above the layouts, so that no layout imports another.
"""
from __future__ import annotations

import inspect

import numpy as np

from .cache import KVCache, contiguous_cache
from .cache_dtypes import cache_dtype
from .h2o import h2o_cache
from .paged import paged_cache
from .quantized_cache import quantized_cache
from .window import window_cache

__all__ = ["CACHE_KINDS", "register_cache", "new_cache", "contiguous"]


def contiguous(n_layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int, dtype="float32",
               compute_dtype=np.float32, capacity: int | None = None) -> KVCache:
    """The contiguous layout: ``contiguous_cache``, or ``quantized_cache`` for int4 and int2."""
    factory = quantized_cache if cache_dtype(dtype).grouped else contiguous_cache
    return factory(n_layers, batch, kv_heads, head_dim, max_len, dtype, compute_dtype, capacity)


CACHE_KINDS: dict = {"contiguous": contiguous, "paged": paged_cache, "window": window_cache,
                     "h2o": h2o_cache}


def register_cache(name: str):
    """Register ``factory(n_layers, batch, kv_heads, head_dim, max_len, dtype, compute_dtype,
    capacity, **options) -> KVCache`` under ``name`` (the ``cache=`` argument of generation)."""
    def decorate(factory):
        CACHE_KINDS[name] = factory
        return factory
    return decorate


def new_cache(kind: str, **kwargs) -> KVCache:
    """The cache layout called ``kind`` (see CACHE_KINDS), built with ``kwargs``."""
    if not isinstance(kind, str) or kind not in CACHE_KINDS:
        raise ValueError(f"no cache layout {kind!r}: the layouts are {', '.join(sorted(CACHE_KINDS))}")
    factory = CACHE_KINDS[kind]
    accepted = inspect.signature(factory).parameters
    unknown = sorted(k for k in kwargs if k not in accepted)
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        raise TypeError(f"cache layout {kind!r} takes no option {', '.join(map(repr, unknown))}")
    return factory(**kwargs)
