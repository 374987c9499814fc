"""One attention head's decode step, as GA-2 programs.

The maths of one step at context length L (x is the newest token's hidden state)::

    q = x Wq     k = x Wk     v = x Wv          (D,)      k, v appended to the caches
    scores  = K q / sqrt(D)                     (L,)      K: (L, D), one row per token
    weights = softmax(scores)                   (L,)
    out     = weights V                         (D,)      V: (L, D)

Every tensor is int8 with one scale; each int32 product goes back to int8 through a
requantizer whose multiplier ``rq_params`` derives from the scales.

Two programs compute the same step:

    cached      load the new token's row, the weights and the L-1 cached rows of K and V;
                project q, k, v for the new token only (1 x 4 tiles); requantize; append
                k and v to the caches in EXT (two ST); then the attention tail.
    recompute   no cache: load all L rows of X, project K and V for every token
                (4 x 4 tiles, each whole matrix requantized at once), project q; the tail.

The tail is the same in both: scores 4 positions at a time (MM with tb=1, reading key
rows as columns straight from the cache), RQ to Q4.4, SM, RQ to int8 weights, weights
times V 4 output columns at a time, RQ to int8, ST.

``sequence(example)`` decodes token by token from an empty cache, EXT persisting from
step to step, and runs both programs at every step.  The checks of this builder live in
``ga2.checks`` and are reached here through ``int_reference``, ``stagewise_problems`` and
``check_pipeline``; ``ga2.mutants`` breaks the builder below one line at a time.  Mutants
are anchored on pieces of the text of this file (see the test that finds each anchor once).
"""
from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from . import checks as _checks
from .cycles import CycleCounts, cycle_counts, instruction_cycles
from .instructions import build
from .limits import EXT_WORDS
from .machine import Machine, as_int8
from .plan import (D, DM, EX_KC, EX_OUT, EX_VC, EX_WK, EX_WQ, EX_WV, EX_X, EXT_PLAN, MAX_TOKENS, SP_ACC,
                   SP_KC, SP_KN, SP_O, SP_O8, SP_P, SP_Q, SP_Q8, SP_S, SP_S8, SP_VC, SP_VN, SP_W, SP_WK,
                   SP_WQ, SP_WV, SP_X, SPAD_PLAN)
from .quant import mantissa_shift, quantize, scale_for

__all__ = [
    "DM", "D", "MAX_TOKENS", "VARIANTS", "EXT_PLAN", "SPAD_PLAN",
    "SOFTMAX_INPUT_ONE", "PROB_ONE", "WEIGHT_ONE",
    "make_example", "rq_params", "ext_image", "project", "attention_tail", "head", "program",
    "ProgramRun", "DecodeStep", "sequence", "read_output",
    "rel_error", "int_reference", "stagewise_problems", "check_pipeline",
    "CycleRow", "cycle_table", "generation_cost", "cycle_breakdown", "default_params",
]

VARIANTS = ("cached", "recompute")

SOFTMAX_INPUT_ONE = 16   # the SM unit reads Q4.4 scores: the real score 1.0 is the integer 16
PROB_ONE = 65536         # SM writes Q0.16 probabilities: 1.0 is 65536
WEIGHT_ONE = 127         # the int8 attention weights: 1.0 is 127


# ---------------------------------------------------------------- data and scales
def _gaussian_draws(seed: int, generator: str):
    """A function ``draw(rows, cols, sd)`` of independent N(0, sd^2) values, row-major.

    ``"numpy"``: ``numpy.random.default_rng(seed)`` (the project's convention).
    ``"python"``: ``random.Random(seed).gauss``, the generator of the published GA-2
    chapter, drawn in the same order (X, then Wq, Wk, Wv), which reproduces its data and so its
    figures.
    """
    if generator == "numpy":
        rng = np.random.default_rng(seed)
        return lambda rows, cols, sd: rng.normal(0.0, sd, size=(rows, cols))
    if generator == "python":
        rng = random.Random(seed)
        return lambda rows, cols, sd: np.array([[rng.gauss(0.0, sd) for _ in range(cols)] for _ in range(rows)])
    raise ValueError(f"generator must be 'numpy' or 'python', not {generator!r}")


def _float_attention(x_rows: np.ndarray, weights: tuple) -> dict:
    """The step in float64 for the last of ``x_rows`` (L, DM): q, K, V, scores, weights, out."""
    wq, wk, wv = weights
    K, V = x_rows @ wk, x_rows @ wv                   # (L, D)
    q = x_rows[-1] @ wq                               # (D,)
    scores = K @ q / math.sqrt(D)                     # (L,)
    e = np.exp(scores - scores.max())
    attention = e / e.sum()                           # (L,)
    return {"q": q, "K": K, "V": V, "scores": scores, "weights": attention, "out_float": attention @ V}


def make_example(L: int, seed: int, generator: str = "numpy") -> dict:
    """A random decode problem of L tokens, with every scale calibrated on it.

    X ~ N(0, 1) (L, DM); Wq, Wk, Wv ~ N(0, 1/DM) (DM, D) each.  The scales are the
    symmetric int8 scales of X, each W, the last token's q, all of K, all of V and the
    float output (calibrated on the example itself, so accuracy figures are optimistic).
    Returns a dict: L, seed, X, W (Wq, Wk, Wv), q, K, V, scores, weights, out_float, scales.
    """
    if L < 1:
        raise ValueError("a decode step needs at least one token")
    draw = _gaussian_draws(seed, generator)
    X = draw(L, DM, 1.0)
    W = tuple(draw(DM, D, 1.0 / math.sqrt(DM)) for _ in range(3))
    example = {"L": L, "seed": seed, "X": X, "W": W, **_float_attention(X, W)}
    example["scales"] = {
        "x": scale_for(X), "wq": scale_for(W[0]), "wk": scale_for(W[1]), "wv": scale_for(W[2]),
        "q": scale_for(example["q"]), "k": scale_for(example["K"]), "v": scale_for(example["V"]),
        "o": scale_for(example["out_float"]),
    }
    return example


def rq_params(example) -> dict[str, tuple[int, int]]:
    """(m, s) of every requantizer in the programs, from the tensor scales.

    q, k, v      int32 x.W in units of scale_x*scale_w      -> int8 at scale_q, _k, _v
    scores       int32 q.k in units of scale_q*scale_k      -> real score / sqrt(D), times 16 (Q4.4)
    weights      Q0.16 probability (65536 = 1)              -> int8 weight (127 = 1)
    out          int32 sum w*v in units of scale_v / 127    -> int8 at scale_o
    """
    s = example["scales"]
    return {
        "q": mantissa_shift(s["x"] * s["wq"] / s["q"]),
        "k": mantissa_shift(s["x"] * s["wk"] / s["k"]),
        "v": mantissa_shift(s["x"] * s["wv"] / s["v"]),
        "scores": mantissa_shift(s["q"] * s["k"] / math.sqrt(D) * SOFTMAX_INPUT_ONE),
        "weights": mantissa_shift(WEIGHT_ONE / PROB_ONE),
        "out": mantissa_shift(s["v"] / (WEIGHT_ONE * s["o"])),
    }


def ext_image(example) -> np.ndarray:
    """EXT before the first step: int8 X (all L rows) and weights; empty caches (zeros)."""
    s, X = example["scales"], example["X"]
    image = np.zeros(EXT_WORDS, dtype=np.int32)
    image[EX_X:EX_X + X.size] = quantize(X, s["x"]).ravel()
    for base, W, name in zip((EX_WQ, EX_WK, EX_WV), example["W"], ("wq", "wk", "wv")):
        image[base:base + DM * D] = quantize(W, s[name]).ravel()
    return image


# ---------------------------------------------------------------- the program builder
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def requantize(dst: int, src: int, n: int, params: tuple[int, int]):
    """RQ of n words with the requantizer ``params`` = (m, s), no ReLU."""
    m, s = params
    return build("RQ", dst=dst, src=src, len=n, m=m, s=s, relu=0)


def project(x_addr: int, w_addr: int, acc_addr: int, rows: int, acc_stride: int) -> list:
    """MM tiles for acc = x W: x (rows, DM) at x_addr, W (DM, D) at w_addr, all in SPAD.

    Row r, column c of the result lands at acc_addr + r * acc_stride + c.  Tiles are
    blocks of up to 4 rows (the array's height) by 4 columns (its width), K = DM.
    """
    tiles = []
    for block in range(_ceil_div(rows, 4)):
        block_rows = min(4, rows - 4 * block)
        for col in range(D // 4):
            tiles.append(build("MM", dst=acc_addr + 4 * block * acc_stride + 4 * col, A=x_addr + 4 * block * DM,
                               B=w_addr + 4 * col, M=block_rows, K=DM, N=4, tb=0, lda=DM, ldb=D, ldc=acc_stride))
    return tiles


def attention_tail(L: int, P: dict) -> list:
    """Attention of the int8 query at SP_Q8 over the L rows of SP_KC and SP_VC; output to EXT_OUT."""
    tail = []
    for tile in range(_ceil_div(L, 4)):  # scores of up to 4 positions: q (1 x D) times 4 key rows read as columns
        n = min(4, L - 4 * tile)
        tail.append(build("MM", dst=SP_S + 4 * tile, A=SP_Q8, B=SP_KC + 4 * tile * D,
                          M=1, K=D, N=n, tb=1, lda=D, ldb=D, ldc=4))
    tail += [
        requantize(SP_S8, SP_S, L, P["scores"]),
        build("SM", dst=SP_P, src=SP_S8, len=L),
        requantize(SP_W, SP_P, L, P["weights"]),
    ]
    for col in range(D // 4):  # 4 output columns at a time: weights (1 x L) times V (L x 4)
        tail.append(build("MM", dst=SP_O + 4 * col, A=SP_W, B=SP_VC + 4 * col,
                          M=1, K=L, N=4, tb=0, lda=L, ldb=D, ldc=4))
    tail += [
        requantize(dst=SP_O8, src=SP_O, n=D, params=P["out"]),
        build("ST", src=SP_O8, dst=EX_OUT, len=D),
    ]
    return tail


def _cached_head(L: int, P: dict) -> list:
    """Everything before the tail, with a KV cache: only the new token is projected."""
    new_row = (L - 1) * D  # word offset of the new token's row in either cache
    prog = [
        build("LD", dst=SP_X, src=EX_X + (L - 1) * DM, len=DM),
        build("LD", dst=SP_WQ, src=EX_WQ, len=3 * DM * D),
    ]
    if L > 1:  # the rows the earlier steps appended
        prog += [
            build("LD", dst=SP_KC, src=EX_KC, len=(L - 1) * D),
            build("LD", dst=SP_VC, src=EX_VC, len=(L - 1) * D),
        ]
    prog += project(SP_X, SP_WQ, SP_Q, rows=1, acc_stride=4)
    prog += project(SP_X, SP_WK, SP_KN, rows=1, acc_stride=4)
    prog += project(SP_X, SP_WV, SP_VN, rows=1, acc_stride=4)
    prog += [
        requantize(SP_Q8, SP_Q, D, P["q"]),
        requantize(dst=SP_KC + new_row, src=SP_KN, n=D, params=P["k"]),
        requantize(dst=SP_VC + new_row, src=SP_VN, n=D, params=P["v"]),
        build("ST", src=SP_KC + new_row, dst=EX_KC + new_row, len=D),
        build("ST", src=SP_VC + new_row, dst=EX_VC + new_row, len=D),
    ]
    return prog


def _recompute_head(L: int, P: dict) -> list:
    """Everything before the tail, without a cache: K and V of all L tokens are projected again."""
    prog = [
        build("LD", dst=SP_X, src=EX_X, len=L * DM),
        build("LD", dst=SP_WQ, src=EX_WQ, len=3 * DM * D),
    ]
    prog += project(SP_X, SP_WK, SP_ACC, rows=L, acc_stride=D)
    prog.append(requantize(SP_KC, SP_ACC, L * D, P["k"]))
    prog += project(SP_X, SP_WV, SP_ACC, rows=L, acc_stride=D)
    prog.append(requantize(SP_VC, SP_ACC, L * D, P["v"]))
    prog += project(SP_X + (L - 1) * DM, SP_WQ, SP_Q, rows=1, acc_stride=4)
    prog.append(requantize(SP_Q8, SP_Q, D, P["q"]))
    return prog


def program(L: int, variant: str, params: dict, beyond_plan: bool = False) -> list:
    """The decode step at context length L (the new token is token L-1) as a GA-2 program.

    ``variant`` is ``"cached"`` or ``"recompute"``; ``params`` is ``rq_params(example)``.
    The memory plan holds MAX_TOKENS (32) tokens: past that, the regions overlap and the
    program would compute garbage, so it is refused unless ``beyond_plan`` asks for a
    program only to be priced by the cycle model (which does not mind the length).
    """
    if L < 1:
        raise ValueError("a decode step needs at least one token")
    if L > MAX_TOKENS and not beyond_plan:
        raise ValueError(f"the memory plan holds {MAX_TOKENS} tokens, not {L}; pass beyond_plan=True "
                         f"to price a longer step with the cycle model (it cannot run correctly)")
    return head(L, variant, params) + attention_tail(L, params) + [build("HALT")]


def head(L: int, variant: str, params: dict) -> list:
    """Everything before the attention tail: the program is ``head + attention_tail + HALT``.

    After either head the scratchpad holds what the tail reads: the int8 query at SP_Q8 and
    the L int8 rows of the key and value caches at SP_KC and SP_VC.
    """
    if variant == "cached":
        return _cached_head(L, params)
    if variant == "recompute":
        return _recompute_head(L, params)
    raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")


# ---------------------------------------------------------------- decoding token by token
class _Run(NamedTuple):
    program: list
    ext_before: np.ndarray
    output: list


class ProgramRun(_Run):
    """One program run: ``(program, ext_before, output)``, and its counters as ``.counters``.

    As a tuple it is the published chapter's triple, so ``prog, ext_before, out8 = step["cached"]``
    and ``step["cached"][2]`` read it as that chapter does; ``counters`` (the machine's five
    counters after the run) rides along as an attribute, outside the tuple.  Left out, it is
    the cycle model's price of the program, which is what the machine counts.
    """

    def __new__(cls, program, ext_before, output, counters: CycleCounts | None = None):
        run = super().__new__(cls, program, ext_before, output)
        run.counters = cycle_counts(program) if counters is None else counters
        return run

    @classmethod
    def _make(cls, iterable):
        return cls(*iterable)

    def _replace(self, **changes):
        """A copy with some fields changed (``counters`` too); a new program is priced afresh."""
        counters = changes.pop("counters", None if "program" in changes else self.counters)
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise ValueError(f"got unexpected field names: {sorted(unknown)!r}")
        return type(self)(*(changes.get(name, value) for name, value in zip(self._fields, self)), counters)

    def __repr__(self) -> str:
        return f"ProgramRun({len(self.program)} instructions, output={self.output}, counters={self.counters})"


@dataclass(frozen=True)
class DecodeStep:
    """Step t of a decode loop (t tokens attended to).

    ``cached`` and ``recompute`` are ``ProgramRun``s (None for a variant not run);
    ``spad`` is the scratchpad after the cached program (after recompute if only it ran).
    Readable as a mapping too: ``step["cached"]`` is ``step.cached``.
    """

    t: int
    cached: ProgramRun | None
    recompute: ProgramRun | None
    spad: np.ndarray

    def __getitem__(self, key: str):
        return getattr(self, key)


def read_output(machine) -> list[int]:
    """The step's int8 output, from EXT."""
    return as_int8(machine.ext[EX_OUT:EX_OUT + D])


def sequence(example, variants=VARIANTS, machine=Machine) -> list[DecodeStep]:
    """Decode the example's L tokens one by one, from an empty cache: step t attends over t tokens.

    The cached program of step t starts from the EXT that step t-1 left (the cache it
    appended to persists); the recompute program starts each step from the initial image
    and ignores any cache.  ``machine`` is the machine class (a benchmark swaps in a naive one).
    """
    P = rq_params(example)
    image = ext_image(example)
    ext = image.copy()
    steps = []
    for t in range(1, example["L"] + 1):
        runs, spad = {}, None
        for variant in variants:
            start = ext if variant == "cached" else image
            prog = program(t, variant, P)
            done = machine(start).run(prog)
            runs[variant] = ProgramRun(prog, start.copy(), read_output(done), done.counters)
            if variant == "cached":
                ext = done.ext  # the cache persists to the next step
            if spad is None or variant == "cached":
                spad = done.spad
        steps.append(DecodeStep(t, runs.get("cached"), runs.get("recompute"), spad))
    return steps


# ---------------------------------------------------------------- the checks, applied to this builder
def _this_builder():
    # A mutated copy of this file runs under its own module name: the checks see that copy.
    return sys.modules[__name__]


rel_error = _checks.rel_error


def int_reference(example, t: int) -> list[int]:
    """The integer result of decode step t, from the maths alone (see ``ga2.checks``)."""
    return _checks.int_reference(example, t, rq_params(example))


def stagewise_problems(example, step) -> list[str]:
    """Stages of ``step`` more than one level from their real-number meaning (see ``ga2.checks``)."""
    return _checks.stagewise_problems(example, step)


def check_pipeline(seeds=range(4), Ls=(1, 2, 5, 9, 16, 24), bound=None, exact=False, stagewise=False):
    """Decode whole sequences both ways and check them; returns ``(worst_error, problems)``.

    At every step of every loop the two programs' outputs must be identical; with ``exact``
    also equal to ``int_reference``; with ``stagewise`` every stage within one level of its
    real-number meaning.  At the last step the error against floating point must stay under
    ``bound`` (if given).  Example (L, seed) uses ``make_example(L, 100 * L + seed)``.
    """
    return _checks.check_pipeline(_this_builder(), seeds=seeds, Ls=Ls, bound=bound, exact=exact,
                                  stagewise=stagewise)


# ---------------------------------------------------------------- what the programs cost
class CycleRow(NamedTuple):
    """One row of the cycle table: a program at one context length and its counters."""

    L: int
    variant: str
    counts: CycleCounts


@lru_cache(maxsize=1)
def _params_for_pricing() -> tuple:
    return tuple(sorted(rq_params(make_example(MAX_TOKENS, 1)).items()))


def default_params() -> dict:
    """Requantizer parameters of ``make_example(32, 1)``: any will do to price a program."""
    return dict(_params_for_pricing())


def cycle_table(Ls=(2, 4, 8, 16, 32), params=None) -> list[CycleRow]:
    """The counters of both programs at each L (from the cycle model: they do not depend on data).

    L may exceed the plan's 32 tokens: the step is then priced, not runnable.
    """
    P = default_params() if params is None else params
    return [CycleRow(L, v, cycle_counts(program(L, v, P, beyond_plan=True))) for L in Ls for v in VARIANTS]


def generation_cost(n: int = 32, params=None) -> dict[str, list[int]]:
    """Total cycles of one step at each context length t = 1..n, per variant (n may exceed 32)."""
    P = default_params() if params is None else params
    return {v: [cycle_counts(program(t, v, P, beyond_plan=True)).total for t in range(1, n + 1)] for v in VARIANTS}


def cycle_breakdown(prog) -> list[tuple[str, int, int]]:
    """(op, instructions, cycles) of a program per op, HALT left out, most cycles first."""
    per_op: dict[str, list[int]] = {}
    for ins in prog:
        if ins.op != "HALT":
            entry = per_op.setdefault(ins.op, [0, 0])
            entry[0] += 1
            entry[1] += instruction_cycles(ins)
    return sorted(((op, n, c) for op, (n, c) in per_op.items()), key=lambda row: -row[2])
