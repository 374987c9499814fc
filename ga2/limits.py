"""The limits of GA-2 programs, checked before anything runs.

GA-2 programs have no branches, so every address an instruction touches is known
from its fields alone: the whole program can be checked statically, and a program
that passes cannot fault at run time (nor loop: it runs exactly once through, so
the machine needs no step limit).

Limits (``EXT_WORDS`` and ``SPAD_WORDS`` are the memory sizes)::

    every field          a non-negative integer
    LD, ST, RQ, SM       len >= 1
    MM                   1 <= M, N <= 4 (the 4 x 4 array); 1 <= K <= 64; tb in {0, 1}
    RQ                   0 <= m < 2^24; 0 <= s <= 63; relu in {0, 1}
    regions              every word read or written lies inside its memory:
                           LD   SPAD[dst, dst+len)   EXT[src, src+len)
                           ST   SPAD[src, src+len)   EXT[dst, dst+len)
                           MM   SPAD[A + i*lda + k], SPAD[B + k*ldb + j] (tb=0) or
                                SPAD[B + j*ldb + k] (tb=1), SPAD[dst + i*ldc + j]
                                for i < M, k < K, j < N
                           RQ, SM  SPAD[src, src+len)  SPAD[dst, dst+len)
    the program          ends with HALT, and has no HALT before its end

A broken limit raises ``ProgramError`` naming the instruction's index, its op and
the field.
"""
from __future__ import annotations

import numbers
from collections.abc import Sequence
from functools import lru_cache

from .instructions import FIELDS, Instr, InstructionFormError, as_instr

__all__ = [
    "EXT_WORDS", "SPAD_WORDS", "MAX_M", "MAX_N", "MAX_K", "MANTISSA_LIMIT", "MAX_SHIFT",
    "ProgramError", "check_program", "check_instruction", "check_ends_with_halt",
]

EXT_WORDS = 8192    # external DRAM, in 32-bit words (the attention programs need 8192)
SPAD_WORDS = 4096   # on-chip scratchpad, in 32-bit words
MAX_M = 4           # rows of the systolic array
MAX_N = 4           # columns of the systolic array
MAX_K = 64          # longest inner dimension one MM streams
MANTISSA_LIMIT = 1 << 24   # the requantizer's multiplier has 24 bits
MAX_SHIFT = 63             # ... and its shift 6 bits

_INT = frozenset({int})    # the types of a plain instruction's fields


class ProgramError(ValueError):
    """A program breaks a limit; ``index``, ``op`` and ``field`` say where."""

    def __init__(self, index: int, op, field: str, reason: str):
        self.index, self.op, self.field, self.reason = index, op, field, reason
        super().__init__(f"instruction {index} ({op}): field '{field}': {reason}")

    def __reduce__(self):  # picklable across worker processes
        return (type(self), (self.index, self.op, self.field, self.reason))


def _check_values(index: int, ins: Instr) -> None:
    """Every field present, an integer, and non-negative."""
    names = FIELDS[ins.op]
    if len(ins.values) == len(names) and set(map(type, ins.values)) <= _INT and min(ins.values, default=0) >= 0:
        return           # the common case at once: the right number of plain non-negative ints
    if len(ins.values) != len(names):
        missing = names[len(ins.values)] if len(ins.values) < len(names) else "values"
        raise ProgramError(index, ins.op, missing,
                           f"{ins.op} takes {len(names)} fields ({', '.join(names) or 'none'}), got {len(ins.values)}")
    for name, value in zip(names, ins.values):
        if type(value) is not int and not isinstance(value, numbers.Integral):
            raise ProgramError(index, ins.op, name, f"must be an integer, got {value!r}")
        if value < 0:
            raise ProgramError(index, ins.op, name, f"must not be negative, got {value}")


def _check_range(index, op, name, value, low, high) -> None:
    if not low <= value <= high:
        raise ProgramError(index, op, name, f"must be in {low}..{high}, got {value}")


def _check_region(index, op, name, start, last, memory, size) -> None:
    """Words start..last (inclusive) must lie inside ``memory`` of ``size`` words."""
    if last >= size:
        raise ProgramError(index, op, name,
                           f"{name}={start} reaches {memory} word {last}, past its end ({size} words)")


def _check_limits(index: int, ins: Instr, ext_words: int, spad_words: int) -> None:
    """The op-specific limits and the memory regions of one well-formed instruction."""
    op, f = ins.op, ins.fields
    if op in ("LD", "ST", "RQ", "SM"):
        _check_range(index, op, "len", f["len"], 1, max(ext_words, spad_words))
        n = f["len"]
    if op == "LD":
        _check_region(index, op, "dst", f["dst"], f["dst"] + n - 1, "SPAD", spad_words)
        _check_region(index, op, "src", f["src"], f["src"] + n - 1, "EXT", ext_words)
    elif op == "ST":
        _check_region(index, op, "src", f["src"], f["src"] + n - 1, "SPAD", spad_words)
        _check_region(index, op, "dst", f["dst"], f["dst"] + n - 1, "EXT", ext_words)
    elif op in ("RQ", "SM"):
        if op == "RQ":
            _check_range(index, op, "m", f["m"], 0, MANTISSA_LIMIT - 1)
            _check_range(index, op, "s", f["s"], 0, MAX_SHIFT)
            _check_range(index, op, "relu", f["relu"], 0, 1)
        _check_region(index, op, "src", f["src"], f["src"] + n - 1, "SPAD", spad_words)
        _check_region(index, op, "dst", f["dst"], f["dst"] + n - 1, "SPAD", spad_words)
    elif op == "MM":
        M, K, N = f["M"], f["K"], f["N"]
        _check_range(index, op, "M", M, 1, MAX_M)
        _check_range(index, op, "K", K, 1, MAX_K)
        _check_range(index, op, "N", N, 1, MAX_N)
        _check_range(index, op, "tb", f["tb"], 0, 1)
        # The last word of a strided block: row (rows-1) at stride, column (cols-1).
        a_last = f["A"] + (M - 1) * f["lda"] + K - 1
        b_rows, b_cols = (N, K) if f["tb"] else (K, N)
        b_last = f["B"] + (b_rows - 1) * f["ldb"] + b_cols - 1
        c_last = f["dst"] + (M - 1) * f["ldc"] + N - 1
        _check_region(index, op, "A", f["A"], a_last, "SPAD", spad_words)
        _check_region(index, op, "B", f["B"], b_last, "SPAD", spad_words)
        _check_region(index, op, "dst", f["dst"], c_last, "SPAD", spad_words)


@lru_cache(maxsize=1 << 16)
def _valid(ins: Instr, ext_words: int, spad_words: int) -> bool:
    """One instruction's own limits, at an unknown index (-1).  Cached: a decode loop builds
    the same instructions again and again, and a frozen ``Instr`` is its own key."""
    _check_values(-1, ins)
    _check_limits(-1, ins, ext_words, spad_words)
    return True


def check_instruction(index: int, item, last: int, ext_words: int = EXT_WORDS,
                      spad_words: int = SPAD_WORDS) -> Instr:
    """Instruction ``index`` of a program whose last index is ``last``, checked: every limit of its
    own, and HALT only at the end.  Returns it as an ``Instr``; raises ``ProgramError`` naming
    ``index`` otherwise.  (``check_program`` is this for every instruction, then the final HALT.)"""
    try:
        ins = as_instr(item)
    except InstructionFormError as err:
        raise ProgramError(index, err.op, err.field, err.reason) from None
    if ins.op not in FIELDS:
        raise ProgramError(index, ins.op, "op", f"unknown operation (GA-2 has {', '.join(FIELDS)})")
    if not set(map(type, ins.values)) <= _INT:
        # Before the cache: 1.0 == 1, so a float must not find the int's entry.
        _check_values(index, ins)
    try:
        _valid(ins, ext_words, spad_words)
    except ProgramError as err:  # the same error, now with the instruction's index
        raise ProgramError(index, err.op, err.field, err.reason) from None
    if ins.op == "HALT" and index != last:
        raise ProgramError(index, "HALT", "op",
                           f"HALT before the end: the {last - index} instruction(s) after it could never run")
    return ins


def check_ends_with_halt(checked: Sequence[Instr], length: int) -> None:
    """The last rule: a program ends with HALT (a missing one is reported at index ``length``,
    the place where it should be; an empty program misses it too)."""
    if not checked or checked[-1].op != "HALT":
        raise ProgramError(length, "HALT", "op", "missing: a program must end with HALT")


def check_program(program: Sequence, ext_words: int = EXT_WORDS, spad_words: int = SPAD_WORDS) -> list[Instr]:
    """Check every limit of every instruction; return the program as a list of ``Instr``.

    ``program`` may hold ``Instr`` objects or mappings ``{"op": ..., field: value}``.
    Raises ``ProgramError(index, op, field, reason)`` at the first broken limit.  A missing
    final HALT is reported at index ``len(program)``, the place where it should be.
    """
    last = len(program) - 1
    checked = [check_instruction(index, item, last, ext_words, spad_words) for index, item in enumerate(program)]
    check_ends_with_halt(checked, len(program))
    return checked
