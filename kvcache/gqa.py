"""Grouped-query attention: the two shapes a serving engine computes it in.

H query heads share G key/value heads: query head h reads key/value head h // r, where r = H / G
(r = 1 is plain multi-head attention; Llama-2-70B has r = 8).  Only the G key/value heads are
cached, so grouping divides the cache by r.  For one query q (d,) and the keys K (t, d) and values
V (t, d) of its head group::

    out = softmax(K q / sqrt(d)) V

* ``attend_new_tokens``: one sequence's n newest tokens (a whole prompt at prefill, or a chunk of
  it) against everything cached for it, causally: the query at position p sees keys 0 .. p.
* ``decode_attention``: one new token for each of B sequences, each against its own first
  ``lengths[b]`` cached positions of a shared [B, G, L, d] buffer.  Positions beyond a sequence's
  length are masked out of the softmax.  ``batched_decode_step`` is the same step for buffers
  that may hold anything beyond a length, NaN included (chapter 5's exercise).

Both compute in the dtype of their inputs (float32 or float64) and return new arrays.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .blas import blas_threads

__all__ = ["causal_attention", "attend_new_tokens", "decode_attention", "batched_decode_step",
           "softmax_inplace"]

# Queries per block in attend_new_tokens: bounds the (H, n, t) score matrix of a long prompt,
# and a block scores only the keys up to its last query, so smaller blocks skip more of the
# causal future: 128 scores 62.5% of a 512-token prompt's 512 x 512 (the mask hides the rest of
# what is scored), where one block of 512 would score it all.
QUERY_BLOCK = 128
# Multiply-adds of one (r, d) @ (d, block) product of decode_attention over a long cache: small
# enough that OpenBLAS multiplies the keys where they lie instead of copying them first (and, on
# this machine, half the largest such product streams the keys faster than the largest).
BLOCK_PRODUCT = 128 * 128 * 4
# Bytes of keys and values from which a grouped decode step is worth cutting across threads.
PARALLEL_BYTES = 32 * 2**20
_pool = None            # the threads that compute the parts (made on first use)


def softmax_inplace(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, overwriting ``scores``: exp(s - max) / sum.  -inf gives 0."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def _future_mask(m: int, dtype) -> np.ndarray:
    """(m, m): 0 where query i may see key j (j <= i), -inf above the diagonal: added to the
    scores of a block's own keys (the last m it sees), it hides each query's future."""
    mask = np.zeros((m, m), dtype)
    mask[np.triu_indices(m, 1)] = -np.inf
    return mask


def attend_new_tokens(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """The n newest tokens of one sequence attending causally to its t cached positions.

    q (n, H, d): queries of positions t - n .. t - 1 (already cached: K and V include them)
    K, V (G, t, d)  ->  (n, H, d)

    Query i sits at position t - n + i and sees keys 0 .. t - n + i.  Queries go in blocks of
    QUERY_BLOCK; a block of m queries scores the keys up to its last query, of which only the
    last m (the block's own positions) need the causal mask.  Everything stays in the inputs'
    dtype: the scale is applied to the queries in that dtype (a float64 scale would turn float32
    scores, softmax and weighted sum into float64).
    """
    n, H, d = q.shape
    G, t, _ = K.shape
    r = H // G
    out = np.empty_like(q)
    qs = q * q.dtype.type(1.0 / math.sqrt(d))                  # (n, H, d), scaled once
    for lo in range(0, n, QUERY_BLOCK):
        hi = min(n, lo + QUERY_BLOCK)
        m = hi - lo
        # (m, G, r, d) -> (G, r * m, d): the r query heads of group g, for every query, as rows
        qg = qs[lo:hi].reshape(m, G, r, d).transpose(1, 2, 0, 3).reshape(G, r * m, d)
        last = t - n + hi                                  # keys beyond the block's last query: unseen
        s = (qg @ K[:, :last].transpose(0, 2, 1)).reshape(G, r, m, last)    # (G, r, m, last)
        s[..., last - m:] += _future_mask(m, s.dtype)      # the block's own keys: each query's future
        p = softmax_inplace(s).reshape(G, r * m, last)
        o = p @ V[:, :last]                                # (G, r*m, d)
        out[lo:hi] = o.reshape(G, r, m, d).transpose(2, 0, 1, 3).reshape(m, H, d)
    return out


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal self-attention of a whole sequence, no cache: the reference.

    q (T, H, d), k, v (T, G, d)  ->  (T, H, d); query i sees keys 0 .. i.
    """
    return attend_new_tokens(q, k.transpose(1, 0, 2), v.transpose(1, 0, 2))


def _scores(qg: np.ndarray, K: np.ndarray, block: int) -> np.ndarray:
    """Every query head against every key: qg (B, G, r, d), K (B, G, T, d) -> (B, G, r, T).

    One product per (b, g), (r, d) @ (d, T), when it is a matrix-vector product (r = 1: BLAS
    streams K as it lies, on all its threads) or small (T <= block).  Otherwise the keys are cut
    into blocks of ``block`` positions, (r, d) @ (d, block) each: BLAS copies a large operand into
    its own layout before multiplying (reading and writing the whole cache once more), a small
    one it multiplies where it lies.
    """
    B, G, r, d = qg.shape
    T = K.shape[2]
    if r == 1 or T <= block:
        return qg @ K.transpose(0, 1, 3, 2)
    n = T // block
    full = n * block                                     # positions in whole blocks; the rest: one product
    s = np.empty((B, G, r, T), qg.dtype)
    Kb = K[:, :, :full].reshape(B, G, n, block, d)                        # (B, G, n, c, d)
    sb = qg[:, :, None] @ Kb.transpose(0, 1, 2, 4, 3)                     # (B, G, n, r, c)
    s[..., :full] = sb.transpose(0, 1, 3, 2, 4).reshape(B, G, r, full)
    if full < T:
        s[..., full:] = qg @ K[:, :, full:].transpose(0, 1, 3, 2)
    return s


def _weighted_values(p: np.ndarray, V: np.ndarray, block: int) -> np.ndarray:
    """sum_t p[..., t] V[..., t, :]: p (B, G, r, T), V (B, G, T, d) -> (B, G, r, d), by blocks of
    positions as ``_scores`` (each block's (r, d) partial sum, then the sum over blocks)."""
    B, G, r, T = p.shape
    d = V.shape[3]
    if r == 1 or T <= block:
        return p @ V
    n = T // block
    full = n * block
    pb = p[..., :full].reshape(B, G, r, n, block).transpose(0, 1, 3, 2, 4)   # (B, G, n, r, c)
    out = (pb @ V[:, :, :full].reshape(B, G, n, block, d)).sum(axis=2)        # (B, G, n, r, d) -> (B, G, r, d)
    if full < T:
        out += p[..., full:] @ V[:, :, full:]
    return out


def _split_across_threads(q, K, V, lengths, threads: int) -> np.ndarray:
    """decode_attention with the sequences (or, for fewer sequences than threads, the key/value
    heads with their query heads) cut into ``threads`` parts computed at once: the parts share
    nothing, so the answer is the same, and every core streams its part of the cache."""
    B, G = K.shape[:2]
    r = q.shape[1] // G
    axis = 0 if B >= threads else 1
    n = (B, G)[axis]
    edges = [n * i // threads for i in range(threads + 1)]
    parts = []
    for lo, hi in zip(edges, edges[1:]):
        if axis == 0:
            parts.append((q[lo:hi], K[lo:hi], V[lo:hi], lengths[lo:hi]))
        else:
            parts.append((q[:, lo * r:hi * r], K[:, lo:hi], V[:, lo:hi], lengths))
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    outs = list(_pool.map(lambda part: _decode_attention(*part), parts))
    return np.concatenate(outs, axis=axis)


def decode_attention(q: np.ndarray, K: np.ndarray, V: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """One decode step for B sequences of different lengths, grouped heads.

    q (B, H, d): each sequence's newest query
    K, V (B, G, T, d): cached keys and values, T >= max(lengths); row b is valid up to lengths[b]
    lengths (B,) >= 1  ->  (B, H, d)

    Whatever finite values lie beyond a length change nothing (they get weight exactly 0; the
    cache only ever stores finite values there, zeros or rows it has forgotten).

    scores (B, G, r, T) = q K^T / sqrt(d), -inf at positions >= lengths[b]; softmax over T;
    out = scores V.  The r query heads of a group are multiplied with its keys together, so K and
    V are read once per step, not once per query head: the step is bound by that read.  A large
    cache with grouped heads (r > 1, at least PARALLEL_BYTES) is cut into as many independent
    parts as BLAS may use threads, computed at once; multi-head attention's products are
    matrix-vector products, which BLAS spreads over its threads itself.
    """
    lengths = np.asarray(lengths)
    B, G = K.shape[:2]
    if q.shape[1] > G and K.nbytes + V.nbytes >= PARALLEL_BYTES:
        threads = min(blas_threads() or 1, max(B, G))
        if threads > 1:
            return _split_across_threads(q, K, V, lengths, threads)
    return _decode_attention(q, K, V, lengths)


def _one_sequence(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """One sequence's decode step over its whole cache: q (H, d), K, V (G, T, d) -> (H, d).

    One product per key/value head over its group of r query heads, with no mask (every cached
    position counts) and no blocks (a batch of one has no other rows to share the products with):
        s (G, T, r) = K q_g^T        the keys as they lie, (T, d) @ (d, r) per head
        p (G, r, T) = softmax(s / sqrt(d)) over T, in place (the scale applied to q)
        out (G, r, d) = p V          (r, T) @ (T, d) per head
    At a decode step of a small model the attention's time is mostly calls, not arithmetic: this
    is two products, one copy and the softmax's in-place passes per layer."""
    G, T, d = K.shape
    r = q.shape[0] // G
    qg = q.reshape(G, r, d) * q.dtype.type(1 / math.sqrt(d))     # in q's dtype: no float64 detour
    p = np.matmul(K, qg.transpose(0, 2, 1)).transpose(0, 2, 1).copy()   # (G, r, T), rows contiguous
    softmax_inplace(p)
    return np.matmul(p, V).reshape(G * r, d)


def _decode_attention(q, K, V, lengths) -> np.ndarray:
    """decode_attention on the calling thread."""
    B, H, d = q.shape
    if B == 1:                                            # one sequence: its own length, nothing masked
        n = int(lengths[0])
        return _one_sequence(q[0], K[0, :, :n], V[0, :, :n])[None]
    G, T = K.shape[1], K.shape[2]
    r = H // G
    block = max(1, BLOCK_PRODUCT // (r * d))            # key positions per product
    qg = q.reshape(B, G, r, d) * (1 / math.sqrt(d))     # heads g*r .. g*r + r - 1 share kv head g
    s = _scores(qg, K, block)                            # (B, G, r, T)
    if lengths.min() < T:                                # some sequence is shorter than the buffer
        beyond = np.arange(T)[None, :] >= lengths[:, None]          # (B, T)
        np.copyto(s, -np.inf, where=beyond[:, None, None, :])
    p = softmax_inplace(s)
    return _weighted_values(p, V, block).reshape(B, H, d)


def batched_decode_step(q: np.ndarray, K: np.ndarray, V: np.ndarray, lengths) -> np.ndarray:
    """``decode_attention`` for buffers that may hold anything beyond a length, NaN and
    infinities included: q (B, H, d), K, V (B, G, T, d), lengths (B,)  ->  (B, H, d).

    A masked score gets a weight of exactly 0, but 0 * NaN is NaN: the positions beyond each
    length are replaced by zeros (in new arrays) before the products.  The inputs are not modified.
    """
    lengths = np.asarray(lengths)
    beyond = (np.arange(K.shape[2])[None, :] >= lengths[:, None])[:, None, :, None]   # (B, 1, T, 1)
    return decode_attention(q, np.where(beyond, 0, K), np.where(beyond, 0, V), lengths)
