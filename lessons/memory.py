"""How many bytes a KV cache takes, and how many sequences fit beside the weights.

One decode step, in one layer, for one key/value head, computes a key and a value of
``head_dim`` numbers each and appends both to the cache.  A model has ``n_layers`` layers and
``n_kv_heads`` key/value heads per layer, so every token leaves behind

    2 * n_layers * n_kv_heads * head_dim            values,

each of ``bytes_per_value`` bytes.  ``n_tokens`` tokens therefore take

    bytes = 2 * L * G * d * T * b.

Everything here is exact integer arithmetic: a byte count is a whole number, and Python's
integers do not overflow where a C ``int32`` (2**31 - 1 = 2,147,483,647) would.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

__all__ = [
    "KIB", "MIB", "GIB", "GB",
    "ModelShape", "MODELS",
    "kv_cache_bytes", "bytes_per_token", "max_tokens", "max_batch", "sequences_in_budget",
    "values_stored_per_step", "format_bytes", "token_count_readings", "readings_grid",
]

KIB = 2**10          # kibibyte: 1,024 bytes
MIB = 2**20          # mebibyte: 1,048,576 bytes
GIB = 2**30          # gibibyte: 1,073,741,824 bytes
GB = 10**9           # gigabyte, as on a GPU's data sheet: 1,000,000,000 bytes


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that decide the size of its cache.

    ``n_heads`` query heads share ``n_kv_heads`` key/value heads (equal for ordinary
    multi-head attention, fewer with grouped-query attention).  ``n_params`` is the nominal
    parameter count of the class ("7B" = 7 * 10**9), which fixes the size of the weights.
    """

    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_params: int

    def bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """Cache bytes one token adds: 2 * L * G * d * b."""
        return bytes_per_token(self.n_layers, self.n_kv_heads, self.head_dim, bytes_per_value)

    def cache_bytes(self, n_tokens: int, bytes_per_value: int = 2) -> int:
        """Cache bytes of one sequence of ``n_tokens`` tokens: 2 * L * G * d * T * b."""
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.head_dim, n_tokens, bytes_per_value)

    def weight_bytes(self, bytes_per_param: int = 2) -> int:
        """Bytes of the weights: parameters times bytes per parameter (2 in fp16)."""
        return self.n_params * bytes_per_param


# The three models of the tables of the published GA-2 chapter ("How big is a cache?").  The 70B-class model has 64 query heads that share
# 8 key/value heads (grouped-query attention), which is why its cache per token is smaller
# than the 7B's.
MODELS = {
    "1B": ModelShape("1B-class", n_layers=16, n_heads=16, n_kv_heads=16, head_dim=64, n_params=10**9),
    "7B": ModelShape("7B-class", n_layers=32, n_heads=32, n_kv_heads=32, head_dim=128, n_params=7 * 10**9),
    "70B-GQA": ModelShape("70B-class, 8 KV heads", n_layers=80, n_heads=64, n_kv_heads=8, head_dim=128,
                          n_params=70 * 10**9),
}


def _whole(name: str, value) -> int:
    """``value`` as a Python int.

    Whole-valued floats such as ``24e9`` (how memory sizes are usually written) are taken at
    their value; a fractional size like 0.5 is refused, since it would make a byte count inexact.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a whole number, got {value!r}") from None


def values_stored_per_step(n_layers: int, n_kv_heads: int, head_dim: int) -> dict[str, int]:
    """What one decode step appends to the cache, counted in values (not bytes).

    Per layer and per key/value head: one key and one value of ``head_dim`` numbers each.
    """
    per_head = 2 * head_dim
    per_layer = n_kv_heads * per_head
    return {"per key/value head": per_head, "per layer": per_layer, "per token": n_layers * per_layer}


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, n_tokens: int,
                   bytes_per_value: int) -> int:
    """Bytes of a KV cache: 2 * L * G * d * T * b, as an exact Python int.

    The 2 counts keys and values; L layers; G key/value heads per layer; d numbers per head;
    T cached tokens; b bytes per number (2 for fp16/bf16, 1 for int8).
    """
    L = _whole("n_layers", n_layers)
    G = _whole("n_kv_heads", n_kv_heads)
    d = _whole("head_dim", head_dim)
    T = _whole("n_tokens", n_tokens)
    b = _whole("bytes_per_value", bytes_per_value)
    if min(L, G, d, T, b) < 0:
        raise ValueError("sizes must not be negative")
    return 2 * L * G * d * T * b


def bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_value: int) -> int:
    """Cache bytes per token: kv_cache_bytes with T = 1, i.e. 2 * L * G * d * b."""
    return kv_cache_bytes(n_layers, n_kv_heads, head_dim, 1, bytes_per_value)


def max_tokens(gpu_bytes: int, weight_bytes: int, n_layers: int, n_kv_heads: int, head_dim: int,
               bytes_per_value: int) -> int:
    """Whole tokens of cache that fit in the memory the weights leave: (M - W) // (2 L G d b).

    0 when the weights alone fill the memory.
    """
    spare = _whole("gpu_bytes", gpu_bytes) - _whole("weight_bytes", weight_bytes)
    if spare <= 0:
        return 0
    return spare // bytes_per_token(n_layers, n_kv_heads, head_dim, bytes_per_value)


def max_batch(gpu_bytes: int, weight_bytes: int, n_layers: int, n_kv_heads: int, head_dim: int,
              seq_len: int, bytes_per_value: int) -> int:
    """Whole sequences of ``seq_len`` tokens whose caches fit beside the weights.

    (M - W) // (2 L G d T b), with M the GPU's memory and W the weights, both in bytes;
    0 when W >= M (the weights alone do not leave room).
    """
    spare = _whole("gpu_bytes", gpu_bytes) - _whole("weight_bytes", weight_bytes)
    if spare <= 0:
        return 0
    per_sequence = kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_value)
    if per_sequence == 0:
        raise ValueError("a sequence with an empty cache fits any number of times")
    return spare // per_sequence


def sequences_in_budget(budget_bytes: int, model: ModelShape, seq_len: int, bytes_per_value: int) -> int:
    """How many sequences of ``seq_len`` tokens fit in ``budget_bytes`` set aside for caches."""
    return max_batch(budget_bytes, 0, model.n_layers, model.n_kv_heads, model.head_dim, seq_len,
                     bytes_per_value)


def format_bytes(n: int) -> str:
    """A byte count in the largest binary unit it reaches: whole when exact, else to 2 decimals.

    >>> format_bytes(524_288), format_bytes(4 * 2**30), format_bytes(640 * 2**20), format_bytes(10**10)
    ('512 KiB', '4 GiB', '640 MiB', '9.31 GiB')
    """
    n = _whole("n", n)
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            if n % size == 0:
                return f"{n // size:,} {unit}"
            return f"{n / size:,.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{n:,} bytes"


def token_count_readings(bytes_per_token_: int = 524_288) -> list[dict]:
    """Ways of reading "about 10 GB spare" and "bytes per token", and the tokens each gives.

    The guide to LLM inference on NVIDIA GPUs that Chapter 3 follows divides the A10's spare
    memory by the 7B-class model's cache per token and states 19,230 tokens.  Each row is one
    reading of the two numbers; ``tokens`` is the whole number of tokens (floor).
    """
    spare = [
        ("10 GB (24 GB - 14 GB)", 24 * GB - 14 * GB),
        ("10 GiB", 10 * GIB),
        ("24 GiB - 14 GB", 24 * GIB - 14 * GB),
    ]
    per_token = [
        (f"{bytes_per_token_:,} bytes (exact)", bytes_per_token_),
        ("0.5 MB = 500,000 bytes", 500_000),
        ("0.00052 GB = 520,000 bytes", 520_000),
        ("0.524 MB = 524,000 bytes", 524_000),
    ]
    rows = []
    for s_label, s in spare:
        for p_label, p in per_token:
            rows.append({"spare": s_label, "spare_bytes": s, "per_token": p_label, "per_token_bytes": p,
                         "tokens": s // p, "ratio": s / p})
    return rows


def readings_grid(readings: list[dict]) -> tuple[list[list], list[str]]:
    """``token_count_readings`` as a grid: (rows, header), a row per reading of the spare memory,
    a column per reading of the bytes per token (both in the readings' order), each cell the
    tokens that pair gives; the header's first cell names the two axes."""
    spares = list(dict.fromkeys(r["spare"] for r in readings))
    per_tokens = list(dict.fromkeys(r["per_token"] for r in readings))
    tokens = {(r["spare"], r["per_token"]): r["tokens"] for r in readings}
    rows = [[s] + [tokens[s, p] for p in per_tokens] for s in spares]
    return rows, ["spare | per token"] + per_tokens
