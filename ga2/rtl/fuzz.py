"""Random valid GA-2 programs, with random memories, for checking the circuit against the model.

``random_cases(count, seed)`` draws programs of 1 to 8 instructions (and HALT) from every op
with fields spread over their whole ranges and their edges:

    LD, ST    lengths 1 .. 64, now and then up to 512; any addresses that fit
    MM        M, N in 1 .. 4 and K in 1 .. 64 (edges weighted up), tb = 0 and 1, strides from 0
              (every row the same) through the matrix width to far apart, output rows that
              overlap (ldc < N) and outputs that overlap the operands
    RQ        m from 0 to 2^24 - 1, s from 0 to 63, relu, ties of the rounding (m = 2^23,
              s = 24: an odd accumulator is exactly half-way), sources that saturate, and
              destinations overlapping the source from above and below
    SM        lengths 1 .. 64 and up to 300, scores over the whole int8 range (d up to 255),
              all-equal scores, and overlapping source and destination

and fills EXT and SPAD with a mix of int8 values, the int8 and int32 extremes and random
words.  Every case passes ``ga2.limits.check_program`` (asserted).  Deterministic for a seed.
"""
from __future__ import annotations

import numpy as np

from ..instructions import build
from ..limits import MAX_K, check_program
from .circuit import Case
from .sources import EXT_WORDS, SPAD_WORDS

__all__ = ["EDGE_WORDS", "random_words", "random_instruction", "random_case", "random_cases"]

#: Words at the edges of the int8 and int32 ranges.
EDGE_WORDS = np.array([0, 1, -1, 127, -127, -128, 128, 255, 0x7FFFFFFF, -0x80000000, 0x7F7F7F7F, -0x7F7F7F80,
                       1 << 20, -(1 << 20)], dtype=np.int64)


def random_words(rng: np.random.Generator, n: int) -> np.ndarray:
    """n words in runs of one kind: int8 values, int8 extremes, small int32, edge words, any 32 bits."""
    out = np.empty(n, dtype=np.int64)
    position = 0
    while position < n:
        run = int(min(n - position, rng.integers(16, 512)))
        kind = rng.integers(5)
        if kind == 0:
            chunk = rng.integers(-128, 128, run)
        elif kind == 1:
            chunk = rng.choice(np.array([-128, -127, 127]), run)
        elif kind == 2:
            chunk = rng.integers(-(1 << 21), 1 << 21, run)
        elif kind == 3:
            chunk = rng.choice(EDGE_WORDS, run)
        else:
            chunk = rng.integers(-(1 << 31), 1 << 31, run)
        out[position:position + run] = chunk
        position += run
    return out


def _length(rng, short: int, long: int) -> int:
    """Mostly 1 .. short, sometimes up to long, and the edge 1 often."""
    r = rng.random()
    if r < 0.15:
        return 1
    if r < 0.85:
        return int(rng.integers(1, short + 1))
    return int(rng.integers(short, long + 1))


def _place(rng, span: int, size: int) -> int:
    """A base address for a block of ``span`` words inside a memory of ``size``."""
    return int(rng.integers(0, size - span + 1))


def _near(rng, base: int, span: int, size: int) -> int:
    """A base overlapping [base, base + span): a few words above or below, kept inside memory."""
    shift = int(rng.integers(-min(span, 8), min(span, 8) + 1))
    return min(max(base + shift, 0), size - span)


def _dims(rng):
    pick = lambda: int(rng.choice([1, 2, 3, 4], p=[0.3, 0.2, 0.2, 0.3]))
    r = rng.random()
    K = 1 if r < 0.15 else MAX_K if r < 0.35 else int(rng.integers(1, MAX_K + 1))
    return pick(), K, pick()


def _stride(rng, rows: int, width: int) -> int:
    """The distance between ``rows`` rows of ``width`` words, the block fitting SPAD."""
    r = rng.random()
    if r < 0.1:
        stride = 0                        # every row the same words
    elif r < 0.6:
        stride = width                    # packed rows
    elif r < 0.8:
        stride = int(rng.integers(0, 2 * width + 1))
    else:
        stride = int(rng.integers(0, 300))
    return stride if rows == 1 else min(stride, (SPAD_WORDS - width) // (rows - 1))


def random_mm(rng):
    """An MM with random shape, transpose, strides and places (C may overlap A or B)."""
    M, K, N = _dims(rng)
    tb = int(rng.integers(2))
    lda = _stride(rng, M, K)
    ldb = _stride(rng, N, K) if tb else _stride(rng, K, N)
    ldc = _stride(rng, M, N) if rng.random() < 0.8 else int(rng.integers(0, N))   # ldc < N: rows overlap
    a_span = (M - 1) * lda + K
    b_span = (N - 1) * ldb + K if tb else (K - 1) * ldb + N
    c_span = (M - 1) * ldc + N
    A, B = _place(rng, a_span, SPAD_WORDS), _place(rng, b_span, SPAD_WORDS)
    r = rng.random()
    dst = _near(rng, A, c_span, SPAD_WORDS) if r < 0.15 else _near(rng, B, c_span, SPAD_WORDS) if r < 0.3 \
        else _place(rng, c_span, SPAD_WORDS)
    return build("MM", dst=dst, A=A, B=B, M=M, K=K, N=N, tb=tb, lda=lda, ldb=ldb, ldc=ldc)


def random_rq(rng):
    n = _length(rng, 64, 300)
    r = rng.random()
    if r < 0.2:
        m, s = 1 << 23, 24                 # acc / 2: odd accumulators are ties
    elif r < 0.35:
        m, s = int(rng.integers(1 << 23, 1 << 24)), int(rng.integers(0, 8))   # saturates
    elif r < 0.45:
        m, s = int(rng.choice([0, 1, (1 << 24) - 1])), int(rng.choice([0, 1, 62, 63]))
    else:
        m, s = int(rng.integers(0, 1 << 24)), int(rng.integers(0, 64))
    src = _place(rng, n, SPAD_WORDS)
    dst = _near(rng, src, n, SPAD_WORDS) if rng.random() < 0.3 else _place(rng, n, SPAD_WORDS)
    return build("RQ", dst=dst, src=src, len=n, m=m, s=s, relu=int(rng.integers(2)))


def random_sm(rng):
    n = _length(rng, 64, 300)
    src = _place(rng, n, SPAD_WORDS)
    dst = _near(rng, src, n, SPAD_WORDS) if rng.random() < 0.3 else _place(rng, n, SPAD_WORDS)
    return build("SM", dst=dst, src=src, len=n)


def random_dma(rng, op: str):
    n = _length(rng, 64, 512)
    spad, ext = _place(rng, n, SPAD_WORDS), _place(rng, n, EXT_WORDS)
    return build("LD", dst=spad, src=ext, len=n) if op == "LD" else build("ST", src=spad, dst=ext, len=n)


def random_instruction(rng, op: str | None = None):
    """One valid instruction (of ``op``, or of a random op)."""
    op = op or str(rng.choice(["LD", "ST", "MM", "RQ", "SM"], p=[0.15, 0.15, 0.3, 0.2, 0.2]))
    if op == "MM":
        return random_mm(rng)
    if op == "RQ":
        return random_rq(rng)
    if op == "SM":
        return random_sm(rng)
    return random_dma(rng, op)


def random_case(rng, label: str) -> Case:
    """A program of 1 to 8 instructions and HALT, with random EXT and SPAD."""
    program = [random_instruction(rng) for _ in range(int(rng.integers(1, 9)))] + [build("HALT")]
    check_program(program, EXT_WORDS, SPAD_WORDS)
    return Case(label, program, random_words(rng, EXT_WORDS), random_words(rng, SPAD_WORDS))


def random_cases(count: int, seed: int = 2024) -> list[Case]:
    """``count`` cases, "fuzz 0" .. ; the first five each open with one op of every kind."""
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(count):
        case = random_case(rng, f"fuzz {k}")
        if k < 5:
            op = ("LD", "ST", "MM", "RQ", "SM")[k]
            case = case._replace(program=[random_instruction(rng, op)] + case.program)
        cases.append(case)
    return cases
