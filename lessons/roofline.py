"""The roofline arithmetic of decoding: ops per byte, arithmetic intensity, time per token.

A processor that does ``flops`` operations per second and moves ``bandwidth`` bytes per second
between memory and its arithmetic units is balanced at

    ops:byte = flops / bandwidth

operations per byte.  An algorithm that performs fewer operations per byte it moves (its
arithmetic intensity) waits on memory: it is memory-bound.  Its speed is then
``bandwidth * intensity`` operations per second, not ``flops``.

Units throughout: bytes, seconds, operations (FLOP) and their rates.  Times come out in
seconds; the helpers that reproduce the printed figures of a widely read guide to LLM inference on
NVIDIA GPUs (its rounding) say so in their names (``guide_*``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

__all__ = [
    "GPU", "GPUS",
    "attention_table", "arithmetic_intensity", "decode_attention_intensity", "weight_intensity",
    "decode_weight_intensity",
    "attainable_flops", "time_per_token", "prefill_time", "generation_time",
    "guide_ms_per_token", "guide_prefill_ms", "guide_total_ms", "seconds_2dp",
    "batched_step_time",
]


@dataclass(frozen=True)
class GPU:
    """A GPU as its data sheet gives it: memory (bytes), bandwidth (bytes/s), fp16 FLOP/s."""

    name: str
    memory_bytes: int
    bandwidth: float
    flops: float

    @property
    def ops_per_byte(self) -> float:
        """The machine's balance point: FLOP/s divided by bytes/s."""
        return self.flops / self.bandwidth


# Dense fp16 tensor-core figures, without the sparsity factor (as the guide Chapter 4 follows gives them).
GPUS = {
    "T4": GPU("T4", memory_bytes=16 * 10**9, bandwidth=300e9, flops=65e12),
    "A10": GPU("A10", memory_bytes=24 * 10**9, bandwidth=600e9, flops=125e12),
    "A100": GPU("A100 SXM 80 GB", memory_bytes=80 * 10**9, bandwidth=2039e9, flops=312e12),
}


def attention_table(n: int, d: int, bytes_per_value: int) -> list[dict]:
    """Loads, operations and stores of standard attention, one row per line of the algorithm.

    Standard (not fused) attention over N queries, N keys and values of width d, with every
    intermediate written to and read back from memory:

    line 1  S = Q K^T   loads Q, K (2 N d values), computes N^2 dot products of 2d ops, stores S (N^2)
    line 2  P = softmax(S)  loads S (N^2), 3 ops per entry, stores P (N^2)
    line 3  O = P V     loads P, V (N^2 + N d), computes N d dot products of 2N ops, stores O (N d)

    Loads and stores are in bytes (values times ``bytes_per_value``); compute is in operations.
    """
    b = bytes_per_value
    return [
        {"line": "1: S = Q K^T", "load": b * 2 * n * d, "compute": 2 * d * n * n, "store": b * n * n},
        {"line": "2: P = softmax(S)", "load": b * n * n, "compute": 3 * n * n, "store": b * n * n},
        {"line": "3: O = P V", "load": b * (n * n + n * d), "compute": 2 * n * n * d, "store": b * n * d},
    ]


def arithmetic_intensity(n: int, d: int, bytes_per_value: int) -> float:
    """Operations per byte of standard attention: (4 d N^2 + 3 N^2) / (b (4 N^2 + 4 N d)).

    Simplified: (4d + 3) N / (4 b (N + d)).  62.42 for N = 4096, d = 128, b = 2.
    """
    rows = attention_table(n, d, bytes_per_value)
    ops = sum(r["compute"] for r in rows)
    moved = sum(r["load"] + r["store"] for r in rows)
    return ops / moved


def decode_attention_intensity(t: int, d: int, bytes_per_value: int, queries_per_kv_head: int = 1) -> float:
    """Operations per byte of ONE decode step of attention for one key/value head over a cache of
    t tokens, read by ``queries_per_kv_head`` query heads (g: 1 for multi-head attention, H / G
    with grouped-query attention, whose g query heads share each cached key and value).

    Loads the g queries (g d values) and the cached K and V (2 t d) once, stores g outputs
    (g d); each query computes t dot products of 2d ops (scores), 3 t ops (softmax) and a
    weighted sum of 2 t d ops: g (4 d + 3) t operations over b (2 t d + 2 g d) bytes.  About
    g operations per byte in fp16, whatever t is: 1 for multi-head attention.
    """
    g = queries_per_kv_head
    if not (isinstance(g, int) and g >= 1):
        raise ValueError(f"queries_per_kv_head must be a whole number >= 1, got {g!r}")
    ops = g * (4 * d + 3) * t
    moved = bytes_per_value * (2 * t * d + 2 * g * d)
    return ops / moved


def weight_intensity(tokens_per_pass: int, bytes_per_param: int = 2) -> float:
    """Operations per byte of the weight matrices in one pass over ``tokens_per_pass`` tokens.

    Every parameter is read once (``bytes_per_param`` bytes) and used in one multiply-add
    (2 operations) per token of the pass: 2 * tokens_per_pass / bytes_per_param.  A decode step
    of a batch of B sequences is a pass over B tokens; a prefill of a prompt of n tokens is a
    pass over n tokens.
    """
    return 2 * tokens_per_pass / bytes_per_param


def decode_weight_intensity(batch: int, bytes_per_param: int = 2) -> float:
    """Operations per byte of the weights in a decode step of ``batch`` sequences: 1.0 at batch 1 in fp16."""
    return weight_intensity(batch, bytes_per_param)


def attainable_flops(gpu: GPU, intensity: float) -> float:
    """The roofline: min(peak FLOP/s, bandwidth * intensity)."""
    return min(gpu.flops, gpu.bandwidth * intensity)


def time_per_token(n_params: float, bytes_per_param: float, bandwidth: float) -> float:
    """Seconds to generate one token when memory-bound: weight bytes / bandwidth.

    Every decode step reads every weight once: n_params * bytes_per_param bytes at
    ``bandwidth`` bytes per second.
    """
    return n_params * bytes_per_param / bandwidth


def prefill_time(n_tokens: float, n_params: float, flops: float) -> float:
    """Seconds to prefill a prompt when compute-bound: n_tokens * 2 * n_params / flops.

    Each token costs about 2 operations per parameter (one multiply, one add).
    """
    return n_tokens * 2 * n_params / flops


def generation_time(n_prompt: int, n_new: int, n_params: float, bytes_per_param: float, gpu: GPU) -> float:
    """Seconds for a prefill of ``n_prompt`` tokens then ``n_new`` decode steps, batch 1."""
    return (prefill_time(n_prompt, n_params, gpu.flops)
            + n_new * time_per_token(n_params, bytes_per_param, gpu.bandwidth))


# --- the guide's printed figures, reproduced by the rounding it used -------------------------

def guide_ms_per_token(seconds: float) -> int:
    """Time per token as the guide prints it: whole milliseconds, TRUNCATED (46.7 -> 46)."""
    return math.floor(seconds * 1000 + 1e-9)


def guide_prefill_ms(seconds: float) -> int:
    """Prefill time as the guide prints it: whole milliseconds, ROUNDED (15.7 -> 16)."""
    return int(Decimal(repr(seconds * 1000)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def guide_total_ms(prefill_seconds: float, per_token_seconds: float, n_new: int) -> int:
    """The guide's total: its rounded prefill plus n_new times its truncated time per token (ms)."""
    return guide_prefill_ms(prefill_seconds) + n_new * guide_ms_per_token(per_token_seconds)


def seconds_2dp(ms: float) -> str:
    """Milliseconds as seconds with 2 decimals, halves rounded up (6,975 ms -> '6.98')."""
    value = Decimal(repr(ms)) / 1000
    return str(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def batched_step_time(gpu: GPU, weight_bytes: int, cache_bytes_per_sequence: int, batch: int) -> float:
    """Seconds of one memory-bound decode step for ``batch`` sequences.

    The weights are read once for the whole batch, every sequence's cache once for itself:
    (W + batch * C) / bandwidth.
    """
    return (weight_bytes + batch * cache_bytes_per_sequence) / gpu.bandwidth
