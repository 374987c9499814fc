"""Hidden tests of ``time_per_token(n_params, bytes_per_param, bandwidth)`` (chapter 4,
after the guide to LLM inference on NVIDIA GPUs).

Decoding is memory-bound: every step reads every weight once, so one token takes
n_params * bytes_per_param / bandwidth seconds (a float).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..registry import Exercise
from ._scalar import type_test, values_test

FN = "time_per_token"


def reference(n_params, bytes_per_param, bandwidth) -> float:
    return float(Fraction(n_params) * Fraction(bytes_per_param) / Fraction(bandwidth))


HINTS = {1000.0: "1000 times the right value: milliseconds instead of seconds?",
         0.001: "a thousandth of the right value: the answer is in seconds"}


def test(name, points, cases):
    return values_test(FN, name, points, cases, reference, exact=False, hints=HINTS)


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(10 ** 8, 2 * 10 ** 11)), float(rng.choice([0.5, 1.0, 2.0, 4.0])),
             float(rng.integers(100, 3400)) * 1e9) for _ in range(n)]


def make_tests():
    return [
        test("a 7B model in 16-bit weights on a 600 GB/s GPU", 1, [(7 * 10 ** 9, 2, 600e9)]),
        test("int8 and 4-bit weights (1 and 0.5 bytes per parameter)", 1,
             [(13 * 10 ** 9, 1, 2e12), (70 * 10 ** 9, 0.5, 3.35e12)]),
        test("25 random models and bandwidths", 2, _random_cases(7001, 25)),
        test("tiny and huge magnitudes", 1, [(1, 1, 1e12), (10 ** 15, 4, 1e9)]),
        type_test(FN, "the result is a float", 1, (7 * 10 ** 9, 2, 600e9), "float", reference),
    ]


EXERCISE = Exercise(name="time_per_token", make_tests=make_tests)
