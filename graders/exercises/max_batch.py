"""Hidden tests of ``max_batch(gpu_bytes, weight_bytes, n_layers, n_kv_heads, head_dim, seq_len,
bytes_per_value)`` (chapter 3).

How many whole sequences of ``seq_len`` tokens have their cache fit beside the weights:
(gpu_bytes - weight_bytes) // (2 L G d seq_len b), an int, and 0 when the weights alone do not
fit (weight_bytes >= gpu_bytes).  The reference counts with Python ints.
"""
from __future__ import annotations

import numpy as np

from ..registry import Exercise
from ._scalar import type_test, values_test

FN = "max_batch"


def reference(gpu_bytes, weight_bytes, n_layers, n_kv_heads, head_dim, seq_len, bytes_per_value) -> int:
    spare = int(gpu_bytes) - int(weight_bytes)
    if spare <= 0:
        return 0
    per_sequence = 2 * int(n_layers) * int(n_kv_heads) * int(head_dim) * int(seq_len) * int(bytes_per_value)
    return spare // per_sequence


HINTS = {2.0: "twice the right count: is the factor 2 (keys and values) missing?"}


def test(name, points, cases, anchor=None):
    return values_test(FN, name, points, cases, reference, exact=True, anchor=anchor, hints=HINTS)


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        L, G, d = int(rng.integers(1, 81)), int(rng.choice([1, 2, 4, 8, 32])), int(rng.choice([64, 80, 128]))
        T, b = int(rng.choice([512, 1000, 2048, 4096, 8191])), int(rng.choice([1, 2]))
        weights = int(rng.integers(1, 200)) * 10 ** 8
        gpu = weights + int(rng.integers(0, 80)) * 10 ** 9 + int(rng.integers(0, 10 ** 9))
        cases.append((gpu, weights, L, G, d, T, b))
    return cases


def make_tests():
    gib = 1 << 30
    seven_b = (32, 32, 128)             # layers, kv heads, head size of a 7B-class model
    per_seq = 2 * 32 * 32 * 128 * 4096 * 2
    return [
        test("a 7B-class model on a 24 GB GPU, 4096-token sequences (the A10 example)", 1,
             [(24 * 10 ** 9, 14 * 10 ** 9, *seven_b, 4096, 2)]),
        test("the weights alone do not fit: 0", 1, [(16 * gib, 20 * gib, *seven_b, 4096, 2)],
             anchor=(24 * gib, 14 * gib, *seven_b, 4096, 2)),
        test("the weights exactly fill the GPU: 0", 1, [(16 * gib, 16 * gib, *seven_b, 4096, 2)],
             anchor=(24 * gib, 14 * gib, *seven_b, 4096, 2)),
        test("exactly k sequences fit, and one byte less fits k - 1", 2,
             [(14 * gib + 5 * per_seq, 14 * gib, *seven_b, 4096, 2),
              (14 * gib + 5 * per_seq - 1, 14 * gib, *seven_b, 4096, 2)]),
        test("less than one sequence fits: 0", 1, [(14 * gib + per_seq - 1, 14 * gib, *seven_b, 4096, 2)],
             anchor=(24 * gib, 14 * gib, *seven_b, 4096, 2)),
        test("grouped-query attention, a 70B-class model on 80 GB and 160 GB", 1,
             [(80 * 10 ** 9, 70 * 10 ** 9, 80, 8, 128, 4096, 2), (160 * 10 ** 9, 140 * 10 ** 9, 80, 8, 128, 8192, 1)]),
        test("30 random GPUs and models, exact", 2, _random_cases(5001, 30)),
        type_test(FN, "the result is a Python int", 1, (24 * 10 ** 9, 14 * 10 ** 9, *seven_b, 4096, 2), "int", reference),
    ]


EXERCISE = Exercise(name="max_batch", make_tests=make_tests)
