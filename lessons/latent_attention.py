"""Multi-head latent attention (MLA, DeepSeek-V2) in plain float64 numpy: one cache of latents,
keys and values rebuilt from it or never built at all.

One layer, H heads of width d, model width D, latent width r.  Each token keeps one latent

    c_t = x_t W_dkv                         (r,)      W_dkv (D, r)

and nothing else.  The keys and values of head h are linear in the latents::

    K_h = C W_uk,h      V_h = C W_uv,h      W_uk,h, W_uv,h: columns h d .. (h+1) d of W_uk, W_uv (r, H d)

**Naive step**: rebuild K_h and V_h of all t + 1 tokens, then attend as usual.  **Absorbed step**:
since q_h . (c_j W_uk,h) = (q_h W_uk,h^T) . c_j, the query is multiplied once by W_uk,h^T (an
r-vector per head) and scored against the latents themselves; and since sum_j w_j (c_j W_uv,h) =
(sum_j w_j c_j) W_uv,h, the weighted sum runs over the latents and W_uv,h comes after it.  K and
V are never built: per cached token the absorbed step does 4 H r operations instead of 4 r H d
(rebuilding) + 4 H d (attending).  ``step_costs`` counts both.

**RoPE** rotates each key by its own position: k_h,j = R_j (c_j W_uk,h), and
q_h . R_j k = (R_t q_h) . (R_j k) depends on j through R_j, so no single matrix W_uk,h^T can be
folded into the query: the absorbed scores without the rotation are simply other numbers
(``absorbed_scores`` against ``roped_scores``).  DeepSeek's repair, the **decoupled RoPE key**:
the latent part carries no position, and each token also keeps one small key k^R_j = R_j (x_j
W_kr) of d_R numbers shared by all heads; each head adds its own rotated query part q^R_h, so a
score is q_h . (c_j W_uk,h) + q^R_h . k^R_j, scaled by 1 / sqrt(d + d_R).  The first term
absorbs as before; the second is an ordinary small dot product (``decoupled_scores``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvcache.rope import apply_rope, rope_cos_sin

__all__ = ["latent_params", "empty_latent_cache", "latent_attend_step", "decompress", "StepCost",
           "step_costs", "rope", "roped_scores", "absorbed_scores", "decoupled_params",
           "decoupled_cache", "decoupled_scores"]


def latent_params(D: int, H: int, d: int, r: int, draw: int = 0) -> dict[str, np.ndarray]:
    """Random float64 weights of one latent-attention layer: Wq (D, H d), Wdkv (D, r), Wuk and
    Wuv (r, H d), each normal with variance 1 / (its input width), from random draw ``draw``."""
    rng = np.random.default_rng(draw)
    return {"Wq": rng.standard_normal((D, H * d)) / math.sqrt(D),
            "Wdkv": rng.standard_normal((D, r)) / math.sqrt(D),
            "Wuk": rng.standard_normal((r, H * d)) / math.sqrt(r),
            "Wuv": rng.standard_normal((r, H * d)) / math.sqrt(r)}


def empty_latent_cache(r: int) -> dict[str, np.ndarray]:
    """The cache before the first token: {"c": (0, r)}."""
    return {"c": np.zeros((0, r))}


def latent_attend_step(x_t, cache, p, n_heads):
    """One decode step of latent attention, absorbed: x_t (D,), cache {"c": (t, r)} ->
    (out (H d,), {"c": (t + 1, r)}); the input cache is left as it was.

    C = [cache c; x_t W_dkv]; per head h: a_h = q_h W_uk,h^T, s = C a_h / sqrt(d), w = softmax(s),
    out_h = (w C) W_uv,h."""
    x_t = np.asarray(x_t, dtype=np.float64)
    C = np.vstack([cache["c"], (x_t @ p["Wdkv"])[None]])            # (t + 1, r), a new array
    r, Hd = p["Wuk"].shape
    d = Hd // n_heads
    q = (x_t @ p["Wq"]).reshape(n_heads, d)                           # (H, d)
    Wuk = p["Wuk"].reshape(r, n_heads, d)
    Wuv = p["Wuv"].reshape(r, n_heads, d)
    a = np.einsum("hd,rhd->hr", q, Wuk)                               # the absorbed queries (H, r)
    s = a @ C.T / math.sqrt(d)                                        # (H, t + 1)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    mixed = w @ C                                                     # (H, r): latents, weighted
    out = np.einsum("hr,rhd->hd", mixed, Wuv)                         # W_uv after the sum
    return out.reshape(Hd), {"c": C}


def decompress(C: np.ndarray, p, n_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """The keys and values a naive step rebuilds from the latents: C (T, r) -> K, V (T, H, d)."""
    T = C.shape[0]
    return (C @ p["Wuk"]).reshape(T, n_heads, -1), (C @ p["Wuv"]).reshape(T, n_heads, -1)


# ---------------------------------------------------------------------- what a step costs


@dataclass(frozen=True)
class StepCost:
    """One decode step of one layer and one sequence: operations (a multiply-add is 2) and the
    bytes it moves."""

    flops: int
    bytes: int


def step_costs(t: int, D: int, H: int, d: int, r: int, bytes_per_number: int = 2) -> dict[str, StepCost]:
    """The naive and the absorbed step with t tokens cached before it (t + 1 after).

    Both: the latent 2 D r, the query 2 D H d.  Naive: K and V of t + 1 tokens rebuilt,
    2 x 2 (t+1) r H d; scores and weighted sum, 2 x 2 (t+1) H d.  Absorbed: the queries
    absorbed, 2 H d r; scores and weighted sum over the latents, 2 x 2 (t+1) H r; W_uv after the
    sum, 2 H r d.  (The softmax's few operations per score are the same in both, left out.)

    Bytes, at ``bytes_per_number``: both read the four weight matrices once and the t + 1
    latents; the naive step also writes the K and V it builds and reads them back,
    2 x 2 (t+1) H d numbers."""
    n = t + 1
    common_flops = 2 * D * r + 2 * D * H * d
    weights = D * H * d + D * r + 2 * r * H * d
    naive = StepCost(common_flops + 4 * n * r * H * d + 4 * n * H * d,
                     (weights + n * r + 4 * n * H * d) * bytes_per_number)
    absorbed = StepCost(common_flops + 2 * H * d * r + 4 * n * H * r + 2 * H * r * d,
                        (weights + n * r) * bytes_per_number)
    return {"naive": naive, "absorbed": absorbed}


# ---------------------------------------------------------------------- RoPE


def rope(x: np.ndarray, positions, theta: float = 10000.0) -> np.ndarray:
    """Rotate each head's vector by its token's position: x (N, heads, d), positions (N,)
    (the engine's rotation, ``kvcache.rope``, in float64)."""
    cos, sin = rope_cos_sin(np.asarray(positions), x.shape[-1], theta, np.float64)
    return apply_rope(x, cos, sin)


def roped_scores(X: np.ndarray, p, n_heads: int, theta: float = 10000.0) -> np.ndarray:
    """The scores of the last token of X (T, D) against every token when the keys are rebuilt
    from the latents and then rotated, as a model with RoPE on its keys computes them:
    (H, T), s_h,j = (R_{T-1} q_h) . (R_j c_j W_uk,h) / sqrt(d)."""
    T = X.shape[0]
    K, _ = decompress(X @ p["Wdkv"], p, n_heads)                     # (T, H, d)
    d = K.shape[-1]
    q = rope((X[-1] @ p["Wq"]).reshape(1, n_heads, d), [T - 1], theta)[0]
    k = rope(K, np.arange(T), theta)
    return np.einsum("hd,jhd->hj", q, k) / math.sqrt(d)


def absorbed_scores(q: np.ndarray, C: np.ndarray, p, n_heads: int) -> np.ndarray:
    """Scores of per-head queries q (H, d) against latents C (T, r) through the absorbed
    matrices: (H, T), s_h,j = (q_h W_uk,h^T) . c_j / sqrt(d)."""
    r, Hd = p["Wuk"].shape
    d = Hd // n_heads
    a = np.einsum("hd,rhd->hr", q, p["Wuk"].reshape(r, n_heads, d))
    return a @ C.T / math.sqrt(d)


def decoupled_params(D: int, H: int, d: int, r: int, d_rope: int, draw: int = 0) -> dict[str, np.ndarray]:
    """``latent_params`` plus the decoupled RoPE projections: Wqr (D, H d_R), one rotated query
    part per head, and Wkr (D, d_R), one rotated key shared by the heads."""
    p = latent_params(D, H, d, r, draw)
    rng = np.random.default_rng(draw + 1)
    p["Wqr"] = rng.standard_normal((D, H * d_rope)) / math.sqrt(D)
    p["Wkr"] = rng.standard_normal((D, d_rope)) / math.sqrt(D)
    return p


def decoupled_cache(X: np.ndarray, p, theta: float = 10000.0) -> dict[str, np.ndarray]:
    """What a token keeps with decoupled RoPE: its latent c (r,) and its rotated key k^R (d_R,):
    X (T, D) -> {"c": (T, r), "kr": (T, d_R)}."""
    T = X.shape[0]
    kr = rope((X @ p["Wkr"])[:, None, :], np.arange(T), theta)[:, 0]
    return {"c": X @ p["Wdkv"], "kr": kr}


def decoupled_scores(X: np.ndarray, p, n_heads: int, absorbed: bool, theta: float = 10000.0) -> np.ndarray:
    """Scores (H, T) of the last token of X (T, D) with decoupled RoPE,
    s_h,j = (q_h . k_h,j + q^R_h . k^R_j) / sqrt(d + d_R):

    naive (``absorbed`` False): each head's key rebuilt, k_h,j = c_j W_uk,h;
    absorbed: q_h W_uk,h^T scored against the latents, as ``absorbed_scores``.
    The rotated part is the same small product either way: R_{T-1} q^R_h against the cache's k^R."""
    T = X.shape[0]
    cache = decoupled_cache(X, p, theta)
    r, Hd = p["Wuk"].shape
    d, d_rope = Hd // n_heads, p["Wkr"].shape[1]
    q = (X[-1] @ p["Wq"]).reshape(n_heads, d)
    qr = rope((X[-1] @ p["Wqr"]).reshape(1, n_heads, d_rope), [T - 1], theta)[0]     # (H, d_R)
    if absorbed:
        content = absorbed_scores(q, cache["c"], p, n_heads) * math.sqrt(d)
    else:
        K, _ = decompress(cache["c"], p, n_heads)
        content = np.einsum("hd,jhd->hj", q, K)
    return (content + qr @ cache["kr"].T) / math.sqrt(d + d_rope)
