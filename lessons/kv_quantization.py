"""Chapter 13's measurements: where SmolLM2's key outliers are, and quantized caches judged on the
real model, the way KIVI (arXiv 2402.02750) and KVQuant (arXiv 2401.18079) build them.

Every quantizer here is the course's one, ``kvcache.quantized.quantize_kv`` and
``dequantize_kv`` (b bits, an offset and a scale per slice); what changes from one cache to the
next is which numbers share a scale and which are kept in full precision:

    keys per token      one scale per key row (d channels): an outlier channel sets every row's range
    keys per channel    one scale per channel over a group of g tokens (KIVI, KVQuant)
    pre-RoPE keys       the keys quantized before their rotation, rotated after (KVQuant)
    window              the newest tokens of an unfinished group in full precision (KIVI)
    sink                the first token in full precision (KVQuant; chapter 14's attention sink)

Values are quantized per token.  ``QuantizedAttention`` is a layer cache for one teacher-forced
pass over a text that attends exactly as decoding with such a cache would: the query at position
t sees key j quantized when j's group had filled by then (j < g floor((t + 1) / g)) with the
window, always without it, and never for the sink.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from kvcache.cache import ContiguousLayerCache, KVCache
from kvcache.quantized import dequantize_kv, quantize_kv
from kvcache.rope import apply_rope, rope_cos_sin

from .harness import Kept

__all__ = ["Config", "GROUP", "capture_kv", "channel_peaks", "row_peak_to_median", "unrotate",
           "fake_quantize", "key_error", "kept_parts", "QuantizedAttention", "quantized_logits",
           "first_within", "pairs_won"]

GROUP = 32          # tokens per group of a channel's scale (KIVI's)


@dataclass(frozen=True)
class Config:
    """One quantized cache: ``bits`` per number, keys ``per`` "token" or "channel", quantized
    ``pre_rope`` or after, with the full-precision ``window`` and ``sink`` or without."""

    bits: int
    per: str = "channel"
    pre_rope: bool = False
    window: bool = True
    sink: bool = True

    @property
    def key(self) -> str:
        """A short name: bits, t(oken) or c(hannel), a(fter) or b(efore) RoPE, and what is kept in
        full precision: w(indow and sink), n(othing), r (the recent window only), s (the sink only):
        "4cbw"."""
        kept = {(True, True): "w", (False, False): "n", (True, False): "r", (False, True): "s"}[self.window, self.sink]
        return f"{self.bits}{self.per[0]}{'b' if self.pre_rope else 'a'}{kept}"

    @property
    def name(self) -> str:
        keys = f"keys per {self.per}" + (", pre-RoPE" if self.pre_rope else "")
        kept = " + ".join(w for w, on in (("window", self.window), ("sink", self.sink)) if on) or "nothing"
        return f"{self.bits} bits, {keys}, full precision: {kept}"


# ------------------------------------------------------------------------------- the keys themselves


def capture_kv(model, ids) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every layer's keys (post-RoPE, as cached) and values of one pass over ``ids``: two lists
    of (G, T, d) arrays."""
    kv = model.new_cache(1, len(ids))
    model.prefill([ids], kv)
    return [layer.keys(0) for layer in kv], [layer.values(0) for layer in kv]


def unrotate(keys: np.ndarray, base: float) -> np.ndarray:
    """The keys before RoPE: (G, T, d) turned back by -p omega_i at position p."""
    G, T, d = keys.shape
    cos, sin = rope_cos_sin(np.arange(T), d, base)
    return apply_rope(keys.transpose(1, 0, 2), cos, -sin).transpose(1, 0, 2)


def rotate(keys: np.ndarray, base: float) -> np.ndarray:
    """RoPE applied to (G, T, d) keys at positions 0 .. T - 1."""
    G, T, d = keys.shape
    cos, sin = rope_cos_sin(np.arange(T), d, base)
    return apply_rope(keys.transpose(1, 0, 2), cos, sin).transpose(1, 0, 2)


def channel_peaks(x: np.ndarray) -> np.ndarray:
    """max over tokens of |x| for every head's channel: (G, T, d) -> (G d,)."""
    return np.abs(x).max(axis=1).reshape(-1)


def row_peak_to_median(x: np.ndarray) -> float:
    """The median over rows (token and head) of max|x| / median|x| of the row's d numbers."""
    a = np.abs(x).reshape(-1, x.shape[-1])
    return float(np.median(a.max(axis=1) / np.median(a, axis=1)))


# ------------------------------------------------------------------------------- the quantizers


def fake_quantize(x: np.ndarray, bits: int, per: str, group: int = GROUP) -> np.ndarray:
    """x (G, T, d) through b-bit codes and back: per "token" (each row's d numbers share a scale)
    or per "channel" (each channel's numbers within a group of ``group`` tokens share one).
    ``quantize_kv`` reduces one axis, whatever the others: every head's rows at once (axis 2),
    every head's whole groups at once (axis 2 of (G, T / g, g, d)), then the last, shorter group."""
    if per == "token":
        return dequantize_kv(*quantize_kv(x, bits, 2))
    G, T, d = x.shape
    full = (T // group) * group
    out = np.empty_like(x, dtype=np.float64)
    if full:
        groups = x[:, :full].reshape(G, T // group, group, d)
        out[:, :full] = dequantize_kv(*quantize_kv(groups, bits, 2)).reshape(G, full, d)
    if full < T:
        out[:, full:] = dequantize_kv(*quantize_kv(x[:, full:], bits, 1))
    return out


def key_error(keys: np.ndarray, bits: int, per: str) -> float:
    """||K - quantized K|| / ||K|| over a layer's keys (G, T, d)."""
    return float(np.linalg.norm(fake_quantize(keys, bits, per) - keys) / np.linalg.norm(keys))


def kept_parts(config: Config, kv_heads: int, head_dim: int, group: int = GROUP) -> list[Kept]:
    """What the cache keeps per token and layer: codes of ``bits`` bits, and float32 scales and
    offsets, per token (2 a row) or per channel (2 d shared by a group of tokens).  The window and
    the sink are a fixed number of tokens, not a share of every token: left out."""
    G, d = kv_heads, head_dim
    key_stats = 2 * G if config.per == "token" else Fraction(2 * G * d, group)
    return [Kept("key codes", G * d, config.bits), Kept("key scales and offsets", key_stats, 32),
            Kept("value codes", G * d, config.bits), Kept("value scales and offsets", 2 * G, 32)]


# ------------------------------------------------------------------------------- on the real model


class QuantizedAttention(ContiguousLayerCache):
    """A float32 layer cache for one teacher-forced pass that attends as a quantized cache of
    ``config`` would at every step (module doc).  ``config`` may be a sequence of configurations,
    one per row: the rows are then the same text, each read through its own cache, so that one
    pass of the model judges several configurations, each row exactly as it would be alone (on
    a CPU this saves no time: 256 rows already keep the matrix products busy).  Only one
    prefill, every row from position 0."""

    def __init__(self, kv_heads, head_dim, max_len, config, rope_base: float):
        configs = (config,) if isinstance(config, Config) else tuple(config)
        if not configs or not all(isinstance(c, Config) for c in configs):
            raise ValueError(f"config must be a Config or a non-empty sequence of them, got {config!r}")
        super().__init__(len(configs), kv_heads, head_dim, max_len)
        self.configs, self.rope_base = configs, rope_base

    @property
    def config(self) -> Config:
        """The first row's configuration (the only one of a one-row cache)."""
        return self.configs[0]

    def _quantized_kv(self, K: np.ndarray, V: np.ndarray, c: Config):
        if c.pre_rope:
            Kq = rotate(fake_quantize(unrotate(K, self.rope_base), c.bits, c.per), self.rope_base)
        else:
            Kq = fake_quantize(K, c.bits, c.per)
        return Kq, fake_quantize(V, c.bits, "token")

    def quantized_mask(self, T: int, config: Config | None = None) -> np.ndarray:
        """(T, T) bool: query t reads key j quantized (``config``: the first row's by default)."""
        c = self.config if config is None else config
        t = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        mask = np.ones((T, T), bool)
        if c.window:
            mask = j < GROUP * ((t + 1) // GROUP)
        if c.sink:
            mask = mask & (j > 0)
        return mask

    def attend(self, q, plan):
        """q (B T, H, d) of the one prefill, row b's T queries after row b - 1's -> (B T, H, d)."""
        if np.any(plan.starts != 0):
            raise ValueError("QuantizedAttention judges one prefill of each row, from position 0")
        out = np.empty_like(q)
        for b, c in enumerate(self.configs):
            lo, hi = int(plan.offsets[b]), int(plan.offsets[b + 1])
            out[lo:hi] = self._attend_row(q[lo:hi], b, c)
        return out

    def exact_blocks(self, T: int, config: Config | None = None) -> list[tuple[slice, slice]]:
        """Where queries read keys exactly, as disjoint (query rows, key columns) blocks whose
        causal part is the complement of ``quantized_mask``: with the window, the rows t with
        floor((t + 1) / g) = m read columns g m .. g m + g - 1 (their unfinished group); the sink,
        column 0 for the rows no window block covers it for."""
        c = self.config if config is None else config
        blocks = []
        if c.window:
            for m in range((T + GROUP) // GROUP):
                rows = slice(max(GROUP * m - 1, 0), min(GROUP * m + GROUP - 1, T))
                if rows.start < rows.stop and GROUP * m < T:
                    blocks.append((rows, slice(GROUP * m, min(GROUP * m + GROUP, T))))
        if c.sink:
            first = GROUP - 1 if c.window else 0                 # rows 0 .. g - 2 read column 0 in block 0
            if first < T:
                blocks.append((slice(first, T), slice(0, 1)))
        return blocks

    def _attend_row(self, q, row: int, c: Config):
        """Row ``row``'s T queries (T, H, d), every head at once: softmax(q k^T / sqrt(d)) over
        the causal keys, keys and values read quantized except in the exact blocks (there, the
        scores are recomputed with the exact keys and the weights also multiply V - V_q).
        Quantized in float64, attended in float32 as the model's own attention is."""
        K, V = self.keys(row), self.values(row)                                      # (G, T, d)
        Kq, Vq = (a.astype(np.float32) for a in self._quantized_kv(K.astype(np.float64), V.astype(np.float64), c))
        T, H, d = q.shape
        G = K.shape[0]
        qg = q.reshape(T, G, H // G, d).transpose(1, 2, 0, 3)          # (G, H/G, T, d): heads of a group
        blocks = self.exact_blocks(T, c)
        w = qg @ Kq[:, None].swapaxes(-1, -2)                           # scores (G, H/G, T, T)
        for rows, cols in blocks:
            w[:, :, rows, cols] = qg[:, :, rows] @ K[:, None, cols].swapaxes(-1, -2)
        w *= np.float32(1 / np.sqrt(d))
        w += _causal_bias(T)
        w -= w.max(axis=-1, keepdims=True)
        np.exp(w, out=w)
        w /= w.sum(axis=-1, keepdims=True)
        o = w @ Vq[:, None]                                             # (G, H/G, T, d)
        for rows, cols in blocks:
            o[:, :, rows] += w[:, :, rows, cols] @ (V - Vq)[:, None, cols]
        return o.transpose(2, 0, 1, 3).reshape(T, H, d).astype(q.dtype)


def _causal_bias(T: int) -> np.ndarray:
    """(T, T) float32: 0 where key j <= query t, -inf after (added to the scores)."""
    return np.where(np.tril(np.ones((T, T), bool)), np.float32(0), np.float32(-np.inf))


def quantized_logits(model, ids, config) -> np.ndarray:
    """The logits (T, V) of one teacher-forced pass over ``ids`` through caches of ``config``;
    with a sequence of configurations, (n, T, V): row i through caches of configs[i], all in one
    pass of the model."""
    cfg = model.config
    rows = 1 if isinstance(config, Config) else len(config)
    layers = [QuantizedAttention(cfg.num_key_value_heads, cfg.head_dim, len(ids), config, cfg.rope_theta)
              for _ in range(cfg.num_hidden_layers)]
    logits = model.forward(np.tile(np.asarray(ids), rows), [len(ids)] * rows, KVCache(layers, "contiguous"),
                           every_token=True)
    return logits if isinstance(config, Config) else logits.reshape(rows, len(ids), -1)


def first_within(judged, reference_perplexity: float, margin: float = 0.1):
    """The judgement with the fewest bytes a token whose perplexity is at most ``margin`` above
    the reference's (a perplexity below it loses nothing), or None; of caches keeping the same
    bytes, the one with the lowest mean KL."""
    close = [j for j in judged if j.perplexity - reference_perplexity <= margin]
    return min(close, key=lambda j: (j.bytes_per_token, j.kl_mean), default=None)


def pairs_won(configs, judged, changed, same) -> int:
    """Of the pairs of caches that differ in one choice only, how many the side where
    ``changed(config)`` is True has the lower mean KL in; ``same(config)`` is what a pair shares
    (every other choice).  configs and judged side by side; pairs with one side missing are left out."""
    pairs: dict = {}
    for c, j in zip(configs, judged):
        pairs.setdefault(same(c), {})[bool(changed(c))] = j.kl_mean
    return sum(p[True] < p[False] for p in pairs.values() if len(p) == 2)
