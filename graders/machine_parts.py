"""The grader's own versions of GA-2's graded parts, for the sandboxes that need a working machine.

A learner's check in ``mutants`` runs builders on ``ga2``'s simulator, whose RQ needs a
requantizer, and ``graders check`` runs the public checks of ``attention_tail`` and ``mutants``,
which need the requantizer and the attention tail.  The sandbox's ``ga2`` is the learner's copy
(those parts are starters there), and this module's functions are installed into it
(``ga2.install``) as compiled code: ``compiled()`` is this file's code object as ``marshal``
bytes, with a file name that names no file, so that nothing in the sandbox has their source.

Written for the grader, with numpy and the standard library only (it runs in the sandbox), and
sharing no code with ``ga2``:

    requant(acc, m, s)      sat127(round_half_away(acc * m / 2^s)): |acc * m| < 2^55 fits in int64;
                            the magnitude is rounded, (|p| + 2^(s-1)) >> s, and the sign put back
    attention_tail(L, P)    the course's tail as instruction dicts, for the course's memory plan:
                            scores = q8 . K^T (1 x L, tiles of 4 keys), RQ, SM, RQ, out = w . V
                            (four 1 x 4 tiles), RQ, ST to EXT
"""
from __future__ import annotations

import marshal
from pathlib import Path

import numpy as np

__all__ = ["requant", "attention_tail", "PARTS", "other_parts", "compiled", "SP", "EX", "D"]

QMAX = 127
D = 16                      # the head's width (= the model width DM)

# The course's memory plan (words): EXT and the scratchpad.
EX = {"X": 0, "WQ": 512, "WK": 768, "WV": 1024, "KC": 2048, "VC": 2560, "OUT": 3072}
SP = {"X": 0, "WQ": 512, "WK": 768, "WV": 1024, "ACC": 1280, "KC": 1792, "VC": 2304, "Q": 2816, "Q8": 2832,
      "S": 2848, "S8": 2880, "P": 2912, "W": 2944, "O": 2976, "O8": 2992, "KN": 3008, "VN": 3024}

PARTS = {"requant": "requant", "attention_tail": "attention_tail"}     # part -> the exercise that builds it
FILE_NAME = "<the grader's GA-2 parts>"     # names no file: no linecache entry, no source


def requant(acc, m, s):
    """sat127(round_half_away(acc * m / 2^s)): an int for an int, an int64 array for an array."""
    m, s = int(m), int(s)
    if np.ndim(acc) == 0:
        p = int(acc) * m
        magnitude = (abs(p) + (1 << s >> 1)) >> s
        return max(-QMAX, min(QMAX, magnitude if p >= 0 else -magnitude))
    p = np.asarray(acc, dtype=np.int64) * m                    # |p| < 2^55: exact in int64
    magnitude = (np.abs(p) + (1 << s >> 1)) >> s
    signed = np.where(p < 0, -magnitude, magnitude)
    return np.minimum(np.maximum(signed, -QMAX, out=signed), QMAX, out=signed)    # np.clip costs more per call


def instruction(op: str, **fields) -> dict:
    return {"op": op, **fields}


def rq(dst: int, src: int, n: int, params) -> dict:
    """RQ of ``n`` words with the requantizer ``params`` = (m, s), no ReLU."""
    return instruction("RQ", dst=dst, src=src, len=n, m=params[0], s=params[1], relu=0)


def attention_tail(L: int, P: dict) -> list[dict]:
    """The course's attention tail for ``L`` tokens with the requantizers ``P``."""
    tail = [instruction("MM", dst=SP["S"] + 4 * j, A=SP["Q8"], B=SP["KC"] + 4 * j * D, M=1, K=D,
                        N=min(4, L - 4 * j), tb=1, lda=D, ldb=D, ldc=4) for j in range((L + 3) // 4)]
    tail += [rq(SP["S8"], SP["S"], L, P["scores"]), instruction("SM", dst=SP["P"], src=SP["S8"], len=L),
             rq(SP["W"], SP["P"], L, P["weights"])]
    tail += [instruction("MM", dst=SP["O"] + 4 * c, A=SP["W"], B=SP["VC"] + 4 * c, M=1, K=L, N=4, tb=0,
                         lda=L, ldb=D, ldc=4) for c in range(D // 4)]
    return tail + [rq(SP["O8"], SP["O"], D, P["out"]), instruction("ST", src=SP["O8"], dst=EX["OUT"], len=D)]


def other_parts(exercise: str) -> tuple[str, ...]:
    """The parts a sandbox of ``exercise``'s public checks gets installed: all but the exercise's own."""
    return tuple(part for part, builder in PARTS.items() if builder != exercise)


def compiled() -> bytes:
    """This module's body compiled (no docstrings), as ``marshal`` bytes: what a sandbox runs to
    have these functions with no source text."""
    source = Path(__file__).read_text(encoding="utf-8")
    return marshal.dumps(compile(source, FILE_NAME, "exec", optimize=2, dont_inherit=True))
