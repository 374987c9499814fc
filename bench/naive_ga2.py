"""A straightforward GA-2 interpreter, word by word in plain Python: the benchmark's yardstick.

It has the interface of ``ga2.machine.Machine`` (``NaiveMachine(ext).run(program)`` with
``.ext``, ``.spad`` and ``.counters``) and the same semantics, but every unit is a Python
loop over words, the way a first simulator is usually written.  It checks programs with
the same ``ga2.limits.check_program``, so the comparison measures execution only.
"""
from __future__ import annotations

import math

from ga2.cycles import CycleCounts, cycle_counts
from ga2.limits import EXT_WORDS, SPAD_WORDS, check_program

_EXP = [math.floor(65536 * math.exp(-d / 16)) for d in range(256)]


def _word(value: int) -> int:
    """A Python int as a signed 32-bit word."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _byte(word: int) -> int:
    """The signed low byte of a word."""
    b = word & 0xFF
    return b - 256 if b >= 128 else b


class NaiveMachine:
    """GA-2 with list memories and per-word loops."""

    def __init__(self, ext=None, spad=None, *, ext_words: int = EXT_WORDS, spad_words: int = SPAD_WORDS):
        self.ext = [0] * ext_words
        self.spad = [0] * spad_words
        for memory, values in ((self.ext, ext), (self.spad, spad)):
            if values is not None:
                for i, v in enumerate(values):
                    memory[i] = _word(int(v))
        self.counters = CycleCounts(0, 0, 0, 0, 0)

    def run(self, program):
        checked = check_program(program, len(self.ext), len(self.spad))
        ext, spad = self.ext, self.spad
        for ins in checked:
            f = ins.fields
            if ins.op == "LD":
                for i in range(f["len"]):
                    spad[f["dst"] + i] = ext[f["src"] + i]
            elif ins.op == "ST":
                for i in range(f["len"]):
                    ext[f["dst"] + i] = spad[f["src"] + i]
            elif ins.op == "MM":
                _matmul(spad, f)
            elif ins.op == "RQ":
                m, s, n = f["m"], f["s"], f["len"]
                source = spad[f["src"]:f["src"] + n]
                for i in range(n):
                    p = source[i] * m
                    r = (abs(p) + ((1 << s) >> 1)) >> s
                    q = max(-127, min(127, r if p >= 0 else -r))
                    spad[f["dst"] + i] = max(0, q) if f["relu"] else q
            elif ins.op == "SM":
                n = f["len"]
                scores = [_byte(spad[f["src"] + i]) for i in range(n)]
                top = max(scores)
                e = [_EXP[top - x] for x in scores]
                z = sum(e)
                for i in range(n):
                    spad[f["dst"] + i] = (e[i] * 65536 + z // 2) // z
        self.counters = self.counters + cycle_counts(checked)
        return self


def _matmul(spad, f) -> None:
    """MM, one product at a time: the int8 rows of A times the int8 columns of B (or its rows,
    ``tb``), every int32 result written once all are computed."""
    result = []
    for i in range(f["M"]):
        row = []
        for j in range(f["N"]):
            acc = 0
            for k in range(f["K"]):
                a = _byte(spad[f["A"] + i * f["lda"] + k])
                b_addr = f["B"] + (j * f["ldb"] + k if f["tb"] else k * f["ldb"] + j)
                acc += a * _byte(spad[b_addr])
            row.append(acc)
        result.append(row)
    for i in range(f["M"]):
        for j in range(f["N"]):
            spad[f["dst"] + i * f["ldc"] + j] = result[i][j]
