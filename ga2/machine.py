"""The GA-2 machine: two word memories, four units, five counters.

State::

    ext    EXT, external DRAM: EXT_WORDS (8192) 32-bit words, numpy int32
    spad   SPAD, the on-chip scratchpad: SPAD_WORDS (4096) 32-bit words, numpy int32

An int8 value is held sign-extended in a word; the units that read int8 operands
(MM, SM) read the low byte of each word as a signed byte, the requantizer reads
whole int32 words.  Every unit works on numpy slices of the memories, one call
per instruction, never word by word.

``Machine(ext).run(program)`` first checks the whole program against every limit
(``ga2.limits``: nothing runs if any instruction is wrong), then executes it and
adds its cycles to the counters.  Programs have no branches, so a checked program
cannot fault or loop, and there is no step limit.

Vector units read their whole source before writing (an in-place RQ is fine);
an MM computes its product before writing it, row by row.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from typing import Callable

import numpy as np

from .cycles import CycleCounts, cycle_counts
from .instructions import Instr
from .limits import EXT_WORDS, SPAD_WORDS, check_program
from .quant import requant
from .softmax import softmax_unit

__all__ = ["Machine", "EXT_WORDS", "SPAD_WORDS", "to_words", "low_byte_signed", "as_int8"]



# Byte 0 of a word is its low byte on a little-endian host, byte 3 on a big-endian one.
_LOW_BYTE = 0 if sys.byteorder == "little" else 3


# The block shapes a program uses are few and recur in every step, so the offsets are cached; the
# caches are bounded because strides come from the program (crafted ones would otherwise grow them
# for the rest of the process).  An entry holds at most SPAD_WORDS offsets (32 KiB).
OFFSET_CACHE_ENTRIES = 128


@lru_cache(maxsize=OFFSET_CACHE_ENTRIES)
def _offsets(rows: int, cols: int, row_stride: int, col_stride: int) -> np.ndarray:
    """(rows, cols) word offsets r * row_stride + c * col_stride of a strided block (cached: few shapes recur)."""
    offsets = np.arange(rows)[:, None] * row_stride + np.arange(cols)[None, :] * col_stride
    offsets.flags.writeable = False
    return offsets


@lru_cache(maxsize=OFFSET_CACHE_ENTRIES)
def _low_bytes(rows: int, cols: int, row_stride: int, col_stride: int) -> np.ndarray:
    """The same block as byte offsets of the words' low bytes, for reading int8 operands."""
    offsets = 4 * _offsets(rows, cols, row_stride, col_stride) + _LOW_BYTE
    offsets.flags.writeable = False
    return offsets


def to_words(values, size: int) -> np.ndarray:
    """A memory of ``size`` words (int32) holding ``values`` (taken mod 2^32), zero-padded."""
    memory = np.zeros(size, dtype=np.int32)
    if values is None:
        return memory
    words = np.asarray(values, dtype=np.int64).ravel()
    if words.size > size:
        raise ValueError(f"{words.size} initial words do not fit a memory of {size} words")
    memory[:words.size] = (words & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    return memory


def low_byte_signed(words) -> np.ndarray:
    """The int8 value in the low byte of each word (numpy's integer cast keeps the low 8 bits)."""
    return np.asarray(words).astype(np.int8)


def as_int8(words) -> list[int]:
    """Words read as int8 values (low byte, signed), as a list of ints."""
    return [int(v) for v in low_byte_signed(words)]


class Machine:
    """A GA-2 with its memories and counters.

    ``Machine(ext=None)``: EXT starts as a copy of ``ext`` (any integer sequence, taken
    mod 2^32, zero-padded to ``ext_words``) or zeros; SPAD starts as zeros (or ``spad``).
    ``run(program)`` returns the machine itself, so ``Machine(ext).run(p).ext`` reads the
    result.  The counters add up over successive runs on the same machine.
    """

    def __init__(self, ext=None, spad=None, *, ext_words: int = EXT_WORDS, spad_words: int = SPAD_WORDS):
        self.ext = to_words(ext, ext_words)
        self.spad = to_words(spad, spad_words)
        # The scratchpad seen as bytes: int8 operands are read straight from the low bytes.
        # (self.spad is only ever written in place, so this view stays valid.)
        self._spad_bytes = self.spad.view(np.int8)
        self.counters = CycleCounts(0, 0, 0, 0, 0)

    # ---------------------------------------------------------------- counters
    @property
    def total(self) -> int:
        return self.counters.total

    cycles = total

    @property
    def matrix(self) -> int:
        return self.counters.matrix

    @property
    def dma(self) -> int:
        return self.counters.dma

    @property
    def vector(self) -> int:
        return self.counters.vector

    @property
    def instructions(self) -> int:
        return self.counters.instructions

    # ---------------------------------------------------------------- running
    def run(self, program, trace: Callable[[int, Instr, "Machine"], None] | None = None) -> "Machine":
        """Check ``program`` (raising ``ProgramError`` before anything runs), execute it, count.

        ``trace(index, instr, machine)``, if given, is called after each instruction.
        """
        checked = check_program(program, self.ext.size, self.spad.size)
        for index, ins in enumerate(checked):
            self._UNITS[ins.op](self, *ins.values)
            if trace is not None:
                trace(index, ins, self)
        self.counters = self.counters + cycle_counts(checked)
        return self

    # ---------------------------------------------------------------- the units
    def _load(self, dst, src, n):
        """LD: SPAD[dst+i] = EXT[src+i], i < n."""
        self.spad[dst:dst + n] = self.ext[src:src + n]

    def _store(self, src, dst, n):
        """ST: EXT[dst+i] = SPAD[src+i], i < n."""
        self.ext[dst:dst + n] = self.spad[src:src + n]

    def _matmul(self, dst, A, B, M, K, N, tb, lda, ldb, ldc):
        """MM: SPAD[dst + i*ldc + j] = sum_k a[i][k] * b[k][j]   (int8 x int8 -> int32).

        a[i][k] = SPAD[A + i*lda + k]                         (M, K)
        b[k][j] = SPAD[B + k*ldb + j]   (tb = 0)              (K, N)
                  SPAD[B + j*ldb + k]   (tb = 1: rows of B read as columns, e.g. the key cache)
        """
        spad, low = self.spad, self._spad_bytes
        a = low[4 * A + _low_bytes(M, K, lda, 1)]                                    # (M, K) int8
        b = low[4 * B + (_low_bytes(K, N, 1, ldb) if tb else _low_bytes(K, N, ldb, 1))]   # (K, N) int8
        c = np.matmul(a, b, dtype=np.int32)                                          # (M, N), |c| <= 2^20
        if ldc >= N or M == 1:   # rows of C do not overlap: one scatter
            spad[dst + _offsets(M, N, ldc, 1)] = c
        else:                    # overlapping rows: write them in order, so the later row wins
            for i in range(M):
                spad[dst + ldc * i:dst + ldc * i + N] = c[i]

    def _requantize(self, dst, src, n, m, s, relu):
        """RQ: dst[i] = sat127(round_half_away(src[i] * m / 2^s)), then max(0, .) if relu."""
        self.spad[dst:dst + n] = requant(self.spad[src:src + n], m, s, relu)

    def _softmax(self, dst, src, n):
        """SM: Q0.16 probabilities of the int8 Q4.4 scores in the low bytes of src."""
        scores = self._spad_bytes[4 * src + _LOW_BYTE:4 * (src + n):4].astype(np.int64)   # (n,)
        self.spad[dst:dst + n] = softmax_unit(scores)

    def _halt(self):
        """HALT: nothing left to do (the checked program ends here)."""

    _UNITS = {"LD": _load, "ST": _store, "MM": _matmul, "RQ": _requantize, "SM": _softmax, "HALT": _halt}
