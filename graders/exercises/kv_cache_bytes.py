"""Hidden tests of ``kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value)``
(chapter 3, after the decoding-with-a-KV-cache exercise).

bytes = 2 L G d T b, an exact integer: one key and one value of d numbers for every layer, every
key/value head and every cached token.  Sizes beyond 2^31 (and 2^63) must stay exact: a numpy
int32 (or int64) product would wrap around.  The reference multiplies Python ints one at a time.
"""
from __future__ import annotations

import numpy as np

from ..registry import Exercise
from ._scalar import type_test, values_test

FN = "kv_cache_bytes"

HINTS = {
    2.0: "it is twice the size: are keys and values counted twice?",
    0.5: "it is half the size: the cache holds a key AND a value (the factor 2)",
    8.0: "it is 8 times the size: bits instead of bytes?",
    0.125: "it is an eighth of the size: bytes, not bits",
}


def reference(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value) -> int:
    total = 2
    for factor in (n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
        total *= int(factor)
    return total


def test(name, points, cases, anchor=None):
    return values_test(FN, name, points, cases, reference, exact=True, hints=HINTS, anchor=anchor)


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    return [tuple(int(v) for v in (rng.integers(1, 97), rng.integers(1, 65), rng.choice([1, 3, 64, 80, 96, 128, 257]),
                                   rng.integers(1, 40_000), rng.choice([1, 2, 4])))
            for _ in range(n)]


def make_tests():
    return [
        test("the 7B-class example of chapter 3 (L = G = 32, d = 128, T = 8192, BF16)", 1,
             [(32, 32, 128, 8192, 2)]),
        test("grouped-query attention (G = 8)", 1, [(32, 8, 128, 8192, 2)]),
        test("no tokens cached yet (T = 0) gives 0", 1, [(32, 8, 128, 0, 2)], anchor=(32, 8, 128, 512, 2)),
        test("one layer, one head, one token, int8 (b = 1)", 1, [(1, 1, 1, 1, 1), (1, 1, 64, 1, 1)]),
        test("30 random model shapes, exact", 2, _random_cases(4001, 30)),
        test("sizes beyond 2^31 bytes are exact (no int32 overflow)", 1,
             [(80, 8, 128, 32_768, 2), (61, 7, 96, 123_457, 4)]),
        test("sizes beyond 2^63 bytes are exact (no int64 overflow)", 1,
             [(1_000, 1_000, 1_000, 10_000_000, 4), (4_096, 512, 4_096, 1_000_000_007, 8),
              (999, 997, 991, 1_000_000_007, 7)]),     # this one is not a float64 either
        type_test(FN, "the result is a Python int", 1, (32, 8, 128, 4096, 2), "int", reference),
    ]


EXERCISE = Exercise(name="kv_cache_bytes", make_tests=make_tests)
