"""Attention for one head, in float64 numpy: the reference every chapter builds on.

Notation (used in every docstring below)::

    T   number of tokens in the sequence
    t   number of cached tokens: the keys and values one query attends to (in attend_step,
        the rows of the cache it is given, before the new token's row is appended)
    D   model width: the size of a token's hidden state x
    d   head width: the size of one query, key or value

One query ``q`` (d,) looks at the keys ``K`` (t, d) and the values ``V`` (t, d)::

    scores  = K q / sqrt(d)          (t,)
    weights = softmax(scores)        (t,)   positive, sum to 1
    out     = weights V              (d,)   a weighted average of the rows of V

Prefill does this for every token of a prompt at once, with a causal mask (token i
may look at tokens 0..i only).  Decoding does it for the newest token only, with
the keys and values of the earlier tokens taken from the KV cache.

Every function returns new arrays; none modifies its arguments.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "softmax",
    "scores",
    "attention_weights",
    "attend",
    "causal_mask",
    "causal_attention_weights",
    "causal_attention",
    "project",
    "empty_cache",
    "append_to_cache",
    "attend_step",
    "decode",
    "decode_with_cache",
    "prefill",
    "prefill_with_cache",
    "step_without_cache",
    "init_params",
]


# ---------------------------------------------------------------- one query


def softmax(scores, axis=-1):
    """Numerically stable softmax along ``axis`` (the last one by default).

    softmax(s)_i = exp(s_i - m) / sum_j exp(s_j - m),   m = max_j s_j

    Subtracting m changes nothing mathematically (the factor exp(-m) cancels) but
    keeps every exponent <= 0, so exp never overflows, and the largest term is
    exactly 1, so the sum is at least 1.  Entries of -inf get weight exactly 0 (a row that is
    all -inf has no weights to give and comes out as nan).  Shape in = shape out.
    """
    s = np.asarray(scores, dtype=np.float64)
    m = np.max(s, axis=axis, keepdims=True)       # (..., 1, ...)
    e = np.exp(s - m)                             # every exponent <= 0
    return e / np.sum(e, axis=axis, keepdims=True)


def scores(q, K):
    """Scaled dot products of one query with every key: K q / sqrt(d).

    q (d,), K (t, d)  ->  (t,)
    """
    q = np.asarray(q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    d = q.shape[-1]
    return K @ q / np.sqrt(d)                     # (t, d) @ (d,) -> (t,)


def attention_weights(q, K):
    """The attention weights of one query: softmax(K q / sqrt(d)).

    q (d,), K (t, d)  ->  (t,), positive, summing to 1
    """
    return softmax(scores(q, K))


def attend(q, K, V):
    """The output of one query: the weighted average of the values.

    out = softmax(K q / sqrt(d)) V
    q (d,), K (t, d), V (t, d_v)  ->  (d_v,)
    """
    w = attention_weights(q, K)                   # (t,)
    return w @ np.asarray(V, dtype=np.float64)    # (t,) @ (t, d_v) -> (d_v,)


# ---------------------------------------------------------------- all queries at once (prefill)


def causal_mask(T):
    """Boolean (T, T) matrix, True where query i may look at key j, i.e. j <= i."""
    return np.tril(np.ones((T, T), dtype=bool))


def causal_attention_weights(Q, K):
    """The (T, T) weight matrix of causal self-attention.

    S = Q K^T / sqrt(d), S_ij = -inf where j > i, W = softmax(S) row by row.
    Row i is exactly attention_weights(Q[i], K[:i+1]) followed by zeros.
    Q (T, d), K (T, d)  ->  (T, T), lower triangular, rows sum to 1
    """
    Q = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    T, d = Q.shape
    S = Q @ K.T / np.sqrt(d)                      # (T, d) @ (d, T) -> (T, T)
    S = np.where(causal_mask(T), S, -np.inf)      # hide the future
    return softmax(S, axis=-1)                    # exp(-inf) = 0: masked weights are exactly 0


def causal_attention(Q, K, V):
    """Causal self-attention of a whole sequence: softmax(mask(Q K^T / sqrt(d))) V.

    Q (T, d), K (T, d), V (T, d_v)  ->  (T, d_v); row i is attend(Q[i], K[:i+1], V[:i+1]).
    """
    W = causal_attention_weights(Q, K)            # (T, T)
    return W @ np.asarray(V, dtype=np.float64)    # (T, T) @ (T, d_v) -> (T, d_v)


# ---------------------------------------------------------------- from hidden states, with a cache


def project(x, p):
    """Queries, keys and values of one token or of many: x Wq, x Wk, x Wv.

    x (D,) or (T, D); p = {"Wq", "Wk", "Wv"}, each (D, d)  ->  three arrays (d,) or (T, d)
    """
    x = np.asarray(x, dtype=np.float64)
    return x @ p["Wq"], x @ p["Wk"], x @ p["Wv"]


def empty_cache(d):
    """A KV cache holding no token yet: {"k": (0, d), "v": (0, d)}."""
    return {"k": np.zeros((0, d)), "v": np.zeros((0, d))}


def append_to_cache(cache, k, v):
    """A new cache with one more row: the input cache is left as it was.

    cache {"k": (t, d), "v": (t, d)}, k (d,), v (d,)  ->  {"k": (t+1, d), "v": (t+1, d)}
    np.vstack copies: t rows are copied at every step (a preallocated buffer avoids this).
    """
    return {"k": np.vstack([cache["k"], k[None]]),   # k[None]: (d,) -> (1, d)
            "v": np.vstack([cache["v"], v[None]])}


def attend_step(x_t, cache, p):
    """One decode step with a KV cache, for one head.

    1. q, k, v = x_t Wq, x_t Wk, x_t Wv          (the new token only; d numbers each)
    2. append k and v to the cache                (t rows -> t + 1 rows)
    3. out = softmax(K q / sqrt(d)) V             (over the whole cache; no mask needed:
                                                   everything in it is the past or the token itself)

    x_t (D,), cache {"k": (t, d), "v": (t, d)} (t may be 0), p {"Wq", "Wk", "Wv"} each (D, d)
    ->  (out (d,), new_cache {"k": (t+1, d), "v": (t+1, d)}).  The input cache is not modified.
    """
    q, k, v = project(x_t, p)                     # (d,) each
    new_cache = append_to_cache(cache, k, v)      # (t+1, d) each
    out = attend(q, new_cache["k"], new_cache["v"])
    return out, new_cache


def decode_with_cache(X, p, cache=None):
    """Feed the tokens of X one at a time through attend_step.

    X (T, D); cache: the cache of the tokens before X (empty if None)
    ->  (outputs (T, d), the cache after the last token (t + T, d))
    """
    X = np.asarray(X, dtype=np.float64)
    if cache is None:
        cache = empty_cache(p["Wk"].shape[1])
    outs = []
    for x_t in X:                                 # one token per step
        out, cache = attend_step(x_t, cache, p)
        outs.append(out)
    d = p["Wv"].shape[1]
    return (np.array(outs) if outs else np.zeros((0, d))), cache


def decode(X, p):
    """Token-by-token decoding from an empty cache: X (T, D) -> outputs (T, d).

    Equal (to rounding) to prefill(X, p), row by row.
    """
    return decode_with_cache(X, p)[0]


def prefill(X, p):
    """Full causal attention of the projected sequence: X (T, D) -> outputs (T, d)."""
    Q, K, V = project(X, p)                       # (T, d) each
    return causal_attention(Q, K, V)


def prefill_with_cache(X, p):
    """Prefill a prompt and return the cache it leaves behind.

    X (T, D)  ->  (outputs (T, d), {"k": (T, d), "v": (T, d)})
    """
    Q, K, V = project(X, p)
    return causal_attention(Q, K, V), {"k": K, "v": V}


def step_without_cache(X_upto_t, p):
    """One decode step WITHOUT a cache: recompute K and V for the whole prefix.

    X_upto_t (t, D): the hidden states of every token so far, the newest last.
    ->  out (d,), equal to the out of attend_step for the newest token.
    Work: K and V for all t tokens (t (D, d) products each) instead of one.
    """
    X = np.asarray(X_upto_t, dtype=np.float64)
    q = X[-1] @ p["Wq"]                           # (d,)  only the newest query is needed
    K = X @ p["Wk"]                               # (t, d) recomputed every step
    V = X @ p["Wv"]                               # (t, d) recomputed every step
    return attend(q, K, V)


def init_params(D, d, rng):
    """Random head weights {"Wq", "Wk", "Wv"}, each (D, d), entries N(0, 1/D)."""
    return {name: rng.normal(0.0, 1.0 / np.sqrt(D), size=(D, d)) for name in ("Wq", "Wk", "Wv")}
