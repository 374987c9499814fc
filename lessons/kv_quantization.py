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
           "first_within"]

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
    or per "channel" (each channel's numbers within a group of ``group`` tokens share one)."""
    out = np.empty_like(x, dtype=np.float64)
    for h in range(x.shape[0]):
        if per == "token":
            out[h] = dequantize_kv(*quantize_kv(x[h], bits, 1))
            continue
        for start in range(0, x.shape[1], group):
            part = x[h, start: start + group]
            out[h, start: start + group] = dequantize_kv(*quantize_kv(part, bits, 0))
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
    ``config`` would at every step (module doc).  Only one sequence, only one prefill."""

    def __init__(self, kv_heads, head_dim, max_len, config: Config, rope_base: float):
        super().__init__(1, kv_heads, head_dim, max_len)
        self.config, self.rope_base = config, rope_base

    def _quantized_kv(self, K: np.ndarray, V: np.ndarray):
        c = self.config
        if c.pre_rope:
            Kq = rotate(fake_quantize(unrotate(K, self.rope_base), c.bits, c.per), self.rope_base)
        else:
            Kq = fake_quantize(K, c.bits, c.per)
        return Kq, fake_quantize(V, c.bits, "token")

    def quantized_mask(self, T: int) -> np.ndarray:
        """(T, T) bool: query t reads key j quantized."""
        t = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        mask = np.ones((T, T), bool)
        if self.config.window:
            mask = j < GROUP * ((t + 1) // GROUP)
        if self.config.sink:
            mask = mask & (j > 0)
        return mask

    def attend(self, q, plan):
        """q (T, H, d) of the one prefill -> (T, H, d)."""
        if plan.batch != 1 or int(plan.starts[0]) != 0:
            raise ValueError("QuantizedAttention judges one prefill of one sequence")
        K, V = self.keys(0).astype(np.float64), self.values(0).astype(np.float64)     # (G, T, d)
        Kq, Vq = self._quantized_kv(K, V)
        T, H, d = q.shape
        G = K.shape[0]
        mask = self.quantized_mask(T)
        causal = np.tril(np.ones((T, T), bool))
        out = np.empty((T, H, d))
        for h in range(H):
            g = h // (H // G)
            qh = q[:, h].astype(np.float64)
            scores = np.where(mask, qh @ Kq[g].T, qh @ K[g].T) / np.sqrt(d)
            scores = np.where(causal, scores, -np.inf)
            w = np.exp(scores - scores.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            out[:, h] = np.where(mask, w, 0) @ Vq[g] + np.where(mask, 0, w) @ V[g]
        return out.astype(q.dtype)


def quantized_logits(model, ids, config: Config) -> np.ndarray:
    """The logits (T, V) of one teacher-forced pass over ``ids`` through caches of ``config``."""
    cfg = model.config
    layers = [QuantizedAttention(cfg.num_key_value_heads, cfg.head_dim, len(ids), config, cfg.rope_theta)
              for _ in range(cfg.num_hidden_layers)]
    return model.forward(np.asarray(ids), [len(ids)], KVCache(layers, "contiguous"), every_token=True)


def first_within(judged, reference_perplexity: float, margin: float = 0.1):
    """The judgement with the fewest bytes a token whose perplexity is within ``margin`` of the
    reference's, or None."""
    close = [j for j in judged if j.perplexity - reference_perplexity <= margin]
    return min(close, key=lambda j: j.bytes_per_token, default=None)
