"""Hidden tests of ``prefill_time(n_tokens, n_params, flops)`` (chapter 4, after the
guide to LLM inference on NVIDIA GPUs).

Prefill is compute-bound: about 2 floating-point operations per parameter per token, so the
prompt takes n_tokens * 2 * n_params / flops seconds (a float).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..registry import Exercise
from ._scalar import type_test, values_test

FN = "prefill_time"


def reference(n_tokens, n_params, flops) -> float:
    return float(Fraction(n_tokens) * 2 * Fraction(n_params) / Fraction(flops))


HINTS = {0.5: "half the right value: a parameter costs 2 operations per token (multiply and add)",
         2.0: "twice the right value: 2 operations per parameter per token, not 4",
         1000.0: "1000 times the right value: milliseconds instead of seconds?"}


def test(name, points, cases):
    return values_test(FN, name, points, cases, reference, exact=False, hints=HINTS)


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 33_000)), int(rng.integers(10 ** 8, 2 * 10 ** 11)),
             float(rng.integers(8, 1000)) * 1e12) for _ in range(n)]


def make_tests():
    return [
        test("a 512-token prompt, 7B parameters, 125 TFLOP/s", 1, [(512, 7 * 10 ** 9, 125e12)]),
        test("one token, and no tokens (0 s)", 1, [(1, 7 * 10 ** 9, 312e12), (0, 7 * 10 ** 9, 312e12)]),
        test("25 random prompts, models and GPUs", 2, _random_cases(8001, 25)),
        test("non-round numbers", 1, [(1023, 6_738_415_616, 65.13e12), (3, 1_000_003, 1.5e9)]),
        type_test(FN, "the result is a float", 1, (512, 7 * 10 ** 9, 125e12), "float", reference),
    ]


EXERCISE = Exercise(name="prefill_time", make_tests=make_tests)
