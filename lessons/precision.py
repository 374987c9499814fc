"""Fewer bytes a value, on a real model: the formats' bits, the error each costs, the decode time
each buys.

The formats (``format_bits``): float32, bfloat16 and float16 as sign, exponent and mantissa bits;
the largest finite value, the smallest normal one, and the relative step (the gap between 1 and
the next value).  bfloat16 keeps float32's 8 exponent bits, hence its range; float16 spends bits
on the mantissa and stops at 65504.

The measures of a format's error, teacher-forced: the model reads a fixed text, and at every
position t its next-token distribution p_t (softmax of the logits) is compared with the float32
model's r_t on the same text (T positions predict tokens 1 .. T-1)::

    KL divergence   KL(r_t || p_t) = sum_v r_t(v) (log r_t(v) - log p_t(v)), averaged over t
    top-1 agreement share of positions where argmax p_t = argmax r_t
    perplexity      exp(-mean_t log p_t(token t+1)): how surprised the model is by the true text

The bytes of a decode step at batch 1 (``step_bytes``): every weight matrix once (the output
layer too: with tied embeddings it is the embedding table, read whole), one embedding row, the
norm gains, and the cache's keys and values at the step's length in the cache's format.  At a
memory bandwidth B the step cannot take less than bytes / B (``lessons.roofline``'s time per token).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from kvcache.cache_dtypes import cache_dtype
from kvcache.gqa import causal_attention
from kvcache.linear import linear
from kvcache.norm import rms_norm, silu
from kvcache.rope import apply_rope, rope_cos_sin

__all__ = ["FormatBits", "format_bits", "bit_fields", "Quality", "log_softmax", "kl_divergence",
           "top1_agreement", "perplexity", "quality", "weight_bytes", "cache_bytes", "step_bytes",
           "Activations", "activation_extremes", "rms_norm_at", "decode_step_seconds",
           "PrecisionPlan", "plan_precision", "TEXT"]

# The fixed text the formats are judged on (written for this course; a few hundred tokens).
TEXT = (
    "A language model writes one token at a time. To choose the next token it looks back at every "
    "token before it, and for each of them it needs two vectors, a key and a value, computed by "
    "every layer of the network. Computing them again at every step would repeat almost all of the "
    "work of the step before, so a serving engine keeps them: this store is the key-value cache. "
    "It grows by one row per layer and per head with every token, and for a long conversation it "
    "can take more memory than the weights themselves. Each step then reads all the weights and "
    "all the cached rows once, and does only a little arithmetic with each number it reads, so "
    "the time of a step is set by how fast memory delivers bytes rather than by how fast the "
    "processor multiplies. That is why engines store numbers in fewer bytes. Half the bytes "
    "means half the time to read them, if nothing else gets in the way, and room for twice as "
    "many conversations in the same memory. The price is precision: a number stored in two bytes "
    "is rounded, and the rounding of many numbers adds up through the layers. Whether the model "
    "still says the same thing is a question to measure, not to assume. The measure that matters "
    "is the distribution of the next token: if it barely moves, the text the model writes barely "
    "changes either, and a reader would not notice the difference."
)


# ---------------------------------------------------------------------- the formats' bits


@dataclass(frozen=True)
class FormatBits:
    """One floating-point format: how its bits are spent, and what that gives."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    largest: float            # the largest finite value
    smallest_normal: float
    step: float               # the gap between 1 and the next value: 2 ** -mantissa_bits


_NUMPY = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def format_bits(name: str) -> FormatBits:
    """The sign/exponent/mantissa split of ``name`` (float32, bfloat16, float16), from the
    format's own description (numpy's and ml_dtypes' finfo)."""
    if name not in _NUMPY:
        raise ValueError(f"format {name!r} is not one of {', '.join(_NUMPY)}")
    info = ml_dtypes.finfo(_NUMPY[name]) if name == "bfloat16" else np.finfo(_NUMPY[name])
    return FormatBits(name, info.bits, info.nexp, info.nmant, float(info.max),
                      float(info.smallest_normal), float(info.eps))


def bit_fields(value: float, name: str) -> tuple[str, str, str]:
    """(sign, exponent, mantissa) bit strings of ``value`` rounded to format ``name``."""
    f = format_bits(name)
    with np.errstate(over="ignore"):                   # past the range: the bits of infinity
        word = int(np.array(value, _NUMPY[name]).view(np.uint32 if f.bits == 32 else np.uint16))
    bits = format(word, f"0{f.bits}b")
    return bits[0], bits[1:1 + f.exponent_bits], bits[1 + f.exponent_bits:]


# ---------------------------------------------------------------------- the measures


@dataclass(frozen=True)
class Quality:
    """A format's error on the text, against the float32 model."""

    kl_mean: float
    kl_max: float
    top1: float               # share of positions, 0 .. 1
    perplexity: float


def log_softmax(z: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64: (..., V) -> (..., V)."""
    z = np.asarray(z, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def kl_divergence(ref_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(softmax(ref) || softmax(logits)) per position: (T, V), (T, V) -> (T,), >= 0."""
    lr, lp = log_softmax(ref_logits), log_softmax(logits)
    return np.maximum((np.exp(lr) * (lr - lp)).sum(axis=-1), 0.0)


def top1_agreement(ref_logits: np.ndarray, logits: np.ndarray) -> float:
    """Share of positions whose most likely token is the reference's."""
    return float(np.mean(np.argmax(ref_logits, axis=-1) == np.argmax(logits, axis=-1)))


def perplexity(logits: np.ndarray, ids) -> float:
    """exp of the mean negative log-probability of each next true token: logits (T, V) of the
    positions 0 .. T-1 of ids (T,); position t predicts ids[t + 1]."""
    ids = np.asarray(ids)
    lp = log_softmax(logits[:-1])
    return float(np.exp(-lp[np.arange(len(ids) - 1), ids[1:]].mean()))


def quality(ref_logits: np.ndarray, logits: np.ndarray, ids) -> Quality:
    """The three measures of ``logits`` against ``ref_logits`` on the text ``ids``."""
    kl = kl_divergence(ref_logits[:-1], logits[:-1])
    return Quality(float(kl.mean()), float(kl.max()), top1_agreement(ref_logits[:-1], logits[:-1]),
                   perplexity(logits, ids))


# ---------------------------------------------------------------------- bytes of a decode step


def weight_bytes(model) -> int:
    """Bytes a batch-1 decode step reads of the weights: every layer's matrices and norm gains,
    the final norm, the output layer whole, and one embedding row (the embedding table is the
    output layer when tied, read once)."""
    total = sum(a.nbytes for w in model.layers
                for a in (w.attn_norm, w.wqkv, w.wo, w.mlp_norm, w.w_gate_up, w.w_down))
    row = model.embed.shape[1] * model.embed.itemsize
    return int(total + model.norm.nbytes + model.lm_head.nbytes + row)


def cache_bytes(model, length: int, dtype=None) -> int:
    """Bytes of the keys and values of ``length`` positions in format ``dtype`` (default: the
    model's): 2 (K, V) x layers x kv heads x length x one row's bytes (its scale included)."""
    cfg = model.config
    fmt = cache_dtype(model.dtype.name if dtype is None else dtype)
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * length * fmt.bytes_per_row(cfg.head_dim)


def step_bytes(model, length: int, dtype=None) -> int:
    """Bytes one decode step at batch 1 must read: the weights and a cache of ``length`` positions."""
    return weight_bytes(model) + cache_bytes(model, length, dtype)


# ---------------------------------------------------------------------- real activations


@dataclass(frozen=True)
class Activations:
    """The largest magnitudes a text produces inside a model (float32)."""

    residual: float           # largest |x| of the residual stream, over layers and positions
    residual_layer: int       # the layer after which it occurs (0-based)
    mlp_hidden: float         # largest |silu(gate) * up|: the input of the down projection
    sum_of_squares: float     # largest sum_i x_i^2 of a residual row: what RMSNorm computes first
    row: np.ndarray           # that residual row (D,) float32
    hidden: np.ndarray        # the last layer's output (T, D): the final norm and head follow


def activation_extremes(model, ids) -> Activations:
    """Run ``model`` (float32) over ``ids`` layer by layer, as ``Model.logits`` does, and keep the
    largest activations: x (T, D) after each layer, the MLP's hidden (T, F)."""
    cfg = model.config
    ids = model.check_tokens(ids)
    T, H, G, d = len(ids), cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    cos, sin = rope_cos_sin(np.arange(T), d, cfg.rope_theta, np.float32)
    x = model.embed[ids].astype(np.float32)
    best = dict(residual=0.0, layer=0, mlp=0.0, squares=0.0, row=x[0])
    for i, w in enumerate(model.layers):
        qkv = linear(rms_norm(x, w.attn_norm, cfg.rms_norm_eps), w.wqkv)           # (T, H d + 2 G d)
        qk = apply_rope(qkv[:, : (H + G) * d].reshape(T, H + G, d), cos, sin)
        v = qkv[:, (H + G) * d:].reshape(T, G, d)
        x = x + linear(causal_attention(qk[:, :H], qk[:, H:], v).reshape(T, H * d), w.wo)
        gate_up = linear(rms_norm(x, w.mlp_norm, cfg.rms_norm_eps), w.w_gate_up)   # (T, 2F)
        F = gate_up.shape[1] // 2
        hidden = silu(gate_up[:, :F]) * gate_up[:, F:]                               # (T, F)
        x = x + linear(hidden, w.w_down)
        best["mlp"] = max(best["mlp"], float(np.abs(hidden).max()))
        if np.abs(x).max() > best["residual"]:
            best.update(residual=float(np.abs(x).max()), layer=i)
        squares = np.square(x.astype(np.float64)).sum(axis=1)                        # (T,)
        if squares.max() > best["squares"]:
            best.update(squares=float(squares.max()), row=x[int(squares.argmax())].copy())
    return Activations(best["residual"], best["layer"], best["mlp"], best["squares"], best["row"], x)


def rms_norm_at(row: np.ndarray, name: str) -> np.ndarray:
    """RMSNorm (gain 1) of one row computed entirely in format ``name``: the sum of squares
    overflows to infinity where the format's range ends, and the row collapses to zeros; within
    the range, a format with few mantissa bits still loses precision summing many squares."""
    dt = _NUMPY[name]
    x = row.astype(dt)
    with np.errstate(over="ignore"):
        ms = np.square(x).sum(dtype=dt) / dt(len(x))
        return (x / np.sqrt(ms + dt(1e-5))).astype(np.float32)


# ---------------------------------------------------------------------- decode time


def decode_step_seconds(model, prompt, steps: int, cache_dtype=None) -> float:
    """Median seconds of one batch-1 decode step after a prefill of ``prompt``: ``steps`` steps,
    each fed the previous step's most likely token."""
    cache = model.new_cache(1, len(prompt) + steps, dtype=cache_dtype)
    token = int(np.argmax(model.prefill([list(prompt)], cache)[0]))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        logits = model.decode([token], cache)
        times.append(time.perf_counter() - start)
        token = int(np.argmax(logits[0]))
    return statistics.median(times)


@dataclass(frozen=True)
class PrecisionPlan:
    """What the chapter measures on the real model, chosen from the machine."""

    weight_dtypes: tuple[str, ...]    # float32 always; the 2-byte models where memory allows
    context: int                      # cached positions of the timed decode steps
    steps: int                        # timed steps per format
    free_bytes: int | None


FLOAT32_MODEL_BYTES = 600 * 2**20        # SmolLM2-135M in float32, with its working set
HALF_MODEL_BYTES = 320 * 2**20           # the same at 2 bytes a value
WORKING_BYTES = 512 * 2**20              # logits of the text for two formats at once, and the rest


def plan_precision(facts, context: int = 512, steps: int = 8) -> PrecisionPlan:
    """Which weight dtypes to load side by side (float32, then bfloat16 and float16 while the
    free memory holds them with room to spare), with the decode context and step count."""
    free = facts.free_memory_bytes
    budget = (free if free is not None else 2 * 2**30) - FLOAT32_MODEL_BYTES - WORKING_BYTES
    dtypes = ["float32"]
    for name in ("bfloat16", "float16"):
        if budget >= HALF_MODEL_BYTES:
            dtypes.append(name)
            budget -= HALF_MODEL_BYTES
    return PrecisionPlan(tuple(dtypes), context, steps, free)
