"""Hidden tests of ``arithmetic_intensity(n, d, bytes_per_value)`` (chapter 4,
after the guide to LLM inference on NVIDIA GPUs).

The standard (non-fused) attention algorithm's operations per byte moved:
loads + stores = b (4 N^2 + 4 N d) bytes (S = Q K^T: loads Q, K and stores S; P = softmax(S):
loads S, stores P; O = P V: loads P and V, stores O); compute = 2 d N^2 + 3 N^2 + 2 N^2 d.
Result (4 d + 3) N / (4 b (N + d)), a float (62.42... for N = 4096, d = 128, b = 2).
The reference adds the table's lines up, in exact fractions.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..registry import Exercise
from ._scalar import type_test, values_test

FN = "arithmetic_intensity"


def reference(n, d, bytes_per_value) -> float:
    N, d, b = Fraction(int(n)), Fraction(int(d)), Fraction(int(bytes_per_value))
    moved = {"S = Q K^T": (2 * N * d + N * N) * b, "P = softmax(S)": (N * N + N * N) * b,
             "O = P V": (N * N + N * d + N * d) * b}
    ops = {"S = Q K^T": 2 * d * N * N, "P = softmax(S)": 3 * N * N, "O = P V": 2 * N * N * d}
    return float(sum(ops.values()) / sum(moved.values()))


HINTS = {2.0: "twice the right value: are the bytes per value (b) left out?",
         0.5: "half the right value: check the bytes moved by each of the three lines"}


def test(name, points, cases):
    return values_test(FN, name, points, cases, reference, exact=False, rtol=1e-9, hints=HINTS)


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 20_000)), int(rng.choice([1, 16, 64, 80, 96, 128, 256])),
             int(rng.choice([1, 2, 4]))) for _ in range(n)]


def make_tests():
    return [
        test("N = 4096, d = 128, b = 2 (the table of chapter 4)", 1, [(4096, 128, 2)]),
        test("the smallest case N = d = b = 1", 1, [(1, 1, 1)]),
        test("non-round sizes (no integer division)", 1, [(1000, 3, 2), (7, 5, 4), (12_345, 96, 1)]),
        test("30 random sizes", 2, _random_cases(6001, 30)),
        type_test(FN, "the result is a float", 1, (4096, 128, 2), "float", reference),
    ]


EXERCISE = Exercise(name="arithmetic_intensity", make_tests=make_tests)
