"""Where does the accuracy go?  The error of the decode step against floating point.

1. Stage by stage (``stage_errors``): start from the all-float step and switch on one
   quantization after another, cumulatively, measuring the relative RMS error of the
   output against the all-float result:

       0 all floating point
       1 + int8 inputs and weights        X, Wq, Wk, Wv rounded to their int8 grids
       2 + int8 q, k, v                   the projections rounded to theirs
       3 + scores rounded to 1/16 (Q4.4)  what the softmax unit can read (saturating at +-127/16)
       4 + integer softmax                the unit's table and divider instead of exp
       5 + int8 attention weights         probabilities rounded to 1/127
       6 + int8 output                    the output rounded to its grid

2. By context length (``length_errors``): the real int8 GA-2 pipeline, i.e. the cached
   program's output at the last step of a whole decode loop on the simulator.

Random Gaussian data, scales calibrated on each example (so the figures are optimistic
about a real deployment, which calibrates on other data).  ``python -m ga2.study`` prints
both tables beside the published chapter's figures.
"""
from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np

from . import attn
from .checks import rel_error
from .quant import dequantize, quantize, round_half_away, saturate
from .softmax import ONE_IN, ONE_OUT, softmax_fixed_array

__all__ = ["STAGES", "PUBLISHED_STAGE_ERRORS", "PUBLISHED_LENGTH_ERRORS",
           "StudyRow", "staged_output", "stage_errors",
           "length_errors", "format_rows", "main"]

STAGES = (
    "all floating point",
    "+ int8 inputs and weights",
    "+ int8 q, k, v",
    "+ scores rounded to 1/16 (Q4.4)",
    "+ integer softmax (table, divider)",
    "+ int8 attention weights",
    "+ int8 output",
)

#: The published chapter's figures (mean %, worst %), for printing beside ours: the chapter that ran
#: this decode step on GA-2 first (``ga2/SPEC.md``).
PUBLISHED_STAGE_ERRORS = {
    STAGES[0]: (0.00, 0.00), STAGES[1]: (1.69, 4.87), STAGES[2]: (1.96, 5.74), STAGES[3]: (2.43, 6.52),
    STAGES[4]: (2.43, 6.52), STAGES[5]: (3.50, 8.25), STAGES[6]: (3.47, 8.52),
}
PUBLISHED_LENGTH_ERRORS = {1: (1.02, 1.98), 2: (1.68, 3.81), 4: (2.36, 7.24), 8: (2.63, 5.22), 16: (3.30, 6.30),
                      24: (4.68, 11.39), 32: (4.59, 8.04)}


class StudyRow(NamedTuple):
    """One row of a study table: what was measured, mean and worst relative error (fractions)."""

    key: object
    mean: float
    worst: float


def _on_grid(values, scale):
    """values rounded to the int8 grid of ``scale``, as real numbers."""
    return dequantize(quantize(values, scale), scale)


def staged_output(example, stage: int) -> np.ndarray:
    """The step's output (D,) in real numbers with quantization stages 1..``stage`` switched on."""
    s, X, W = example["scales"], example["X"], example["W"]
    if stage >= 1:
        X = _on_grid(X, s["x"])
        W = tuple(_on_grid(w, s[name]) for w, name in zip(W, ("wq", "wk", "wv")))
    q, K, V = X[-1] @ W[0], X @ W[1], X @ W[2]                      # (D,), (L, D), (L, D)
    if stage >= 2:
        q, K, V = _on_grid(q, s["q"]), _on_grid(K, s["k"]), _on_grid(V, s["v"])
    scores = K @ q / math.sqrt(attn.D)                                # (L,)
    if stage >= 3:
        scores = saturate(round_half_away(scores * ONE_IN)) / ONE_IN
    if stage >= 4:
        p = softmax_fixed_array(round_half_away(scores * ONE_IN)) / ONE_OUT
    else:
        e = np.exp(scores - scores.max())
        p = e / e.sum()
    if stage >= 5:
        p = round_half_away(p * 127) / 127
    out = p @ V                                                       # (D,)
    if stage >= 6:
        out = _on_grid(out, s["o"])
    return out


def _relative(out, example) -> float:
    ref = example["out_float"]
    return float(np.sqrt(np.mean((out - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))


def stage_errors(L: int = 16, n: int = 60, first_seed: int = 5000, generator: str = "numpy") -> list[StudyRow]:
    """Mean and worst error of each cumulative stage, over n examples of L tokens (seeds first_seed + i)."""
    examples = [attn.make_example(L, first_seed + i, generator) for i in range(n)]
    rows = []
    for stage, name in enumerate(STAGES):
        errors = [_relative(staged_output(ex, stage), ex) for ex in examples]
        rows.append(StudyRow(name, float(np.mean(errors)), float(np.max(errors))))
    return rows


def length_errors(Ls=(1, 2, 4, 8, 16, 24, 32), n: int = 30, first_seed: int = 9000,
                  generator: str = "numpy") -> list[StudyRow]:
    """Error of the GA-2 pipeline (the last step of a cached decode loop) by context length.

    Example i at length L uses seed first_seed + 100 * L + i.
    """
    rows = []
    for L in Ls:
        errors = []
        for i in range(n):
            example = attn.make_example(L, first_seed + 100 * L + i, generator)
            last = attn.sequence(example, variants=("cached",))[-1]
            errors.append(rel_error(example, last.cached.output))
        rows.append(StudyRow(L, float(np.mean(errors)), float(np.max(errors))))
    return rows


def format_rows(rows, published: dict, key_title: str, key_width: int) -> str:
    """A table of our mean and worst errors beside the published ones ("pub."), in percent."""
    lines = [f"{key_title:>{key_width}s}  {'mean':>7s} {'worst':>7s}   {'pub. mean':>9s} {'pub. worst':>10s}"]
    for key, mean, worst in rows:
        their_mean, their_worst = published.get(key, (float("nan"), float("nan")))
        lines.append(f"{str(key):>{key_width}s}  {mean * 100:6.2f}% {worst * 100:6.2f}%   "
                     f"{their_mean:8.2f}% {their_worst:9.2f}%")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # --published-generator: the name of what it draws; --seed-generator, its first name, still works
    generator = "python" if {"--published-generator", "--seed-generator"} & set(argv) else "numpy"
    print(f"(data: {generator} generator; '--published-generator' draws the published chapter's exact data)\n")
    print("== 1. error added by each quantization step (cumulative), L = 16, 60 random examples")
    print(format_rows(stage_errors(generator=generator), PUBLISHED_STAGE_ERRORS, "stage", 36))
    print("\n== 2. the int8 GA-2 pipeline (simulator) against floating point, by context length (30 examples each)")
    print(format_rows(length_errors(generator=generator), PUBLISHED_LENGTH_ERRORS, "L", 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
