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

Decoding.  Checking an instruction, pricing it and working out the word and byte
offsets an MM reads and writes depend on its fields alone, and a decode loop runs
the same instructions step after step.  So each instruction is decoded once
(``decode``) into::

    (instr, (unit, operands), cost, halt)
        unit      the unit's method, called as unit(machine, *operands)
        operands  the fields (LD, ST, RQ, SM), or for MM the absolute offsets:
                    a  (M, K) byte offsets of A's low bytes in SPAD
                    b  (K, N) byte offsets of B's low bytes (already transposed when tb = 1)
                    c  (M, N) word offsets of C, or the M row slices when rows overlap
        cost      its five counters (``ga2.cycles``: issue + wait, the wait in its unit's counter)

and the decoded form is kept in a table keyed by the instruction itself and the
memory sizes it was checked against.  Only instructions whose fields are all plain
``int`` are kept (``Instr`` is frozen, and 1.0 == 1 must not find the int's entry):
anything else is checked and decoded afresh at every run, by the same code.  A
program is a list of keys, never a key itself, so a program changed between two
runs is decoded from what it holds at the second.  The table holds at most
``DECODED_CACHE_ENTRIES`` instructions (when full, it starts afresh): crafted
programs cannot grow it for the rest of the process.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from typing import Callable, NamedTuple

import numpy as np

from .cycles import ISSUE_CYCLES, UNIT, CycleCounts, wait_cycles
from .instructions import Instr
from .limits import EXT_WORDS, SPAD_WORDS, check_ends_with_halt, check_instruction
from .quant import requant
from .softmax import softmax_unit

__all__ = ["Machine", "EXT_WORDS", "SPAD_WORDS", "to_words", "low_byte_signed", "as_int8", "DecodedProgram", "decode",
           "DECODED_CACHE_ENTRIES"]



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


# ---------------------------------------------------------------- decoding (see the module docstring)
DECODED_CACHE_ENTRIES = 2048     # an MM's entry holds at most (2 * 256 + 16) offsets: a few MB at most
_COUNTER = {"matrix": 1, "dma": 2, "vector": 3}   # each unit's counter, as an index into CycleCounts
_INT = frozenset({int})
_decoded: dict[tuple[int, int], dict[Instr, tuple]] = {}   # (ext_words, spad_words) -> {instr: entry}
_SIZES_KEPT = 4                  # memory sizes with a table of their own (a machine of odd size is rare)


class DecodedProgram(NamedTuple):
    """A checked program ready to run: its instructions, the unit calls, and its counters."""

    instructions: list    # the program as Instr (the items themselves where they were Instr)
    steps: list           # (unit, operands) per instruction: unit(machine, *operands)
    counts: CycleCounts   # what one run adds to the counters (ga2.cycles)


def _mm_operands(dst, A, B, M, K, N, tb, lda, ldb, ldc) -> tuple:
    """An MM's absolute offsets: (a, b, c) as the module docstring says."""
    a = 4 * A + _low_bytes(M, K, lda, 1)                                            # (M, K)
    b = 4 * B + (_low_bytes(K, N, 1, ldb) if tb else _low_bytes(K, N, ldb, 1))      # (K, N)
    if ldc >= N or M == 1:   # rows of C do not overlap: one scatter
        c = dst + _offsets(M, N, ldc, 1)                                            # (M, N)
    else:                    # overlapping rows: written in order, so the later row wins
        c = tuple(slice(dst + ldc * i, dst + ldc * i + N) for i in range(M))
    a.flags.writeable = b.flags.writeable = False     # kept in the table: nobody may change them
    if not isinstance(c, tuple):
        c.flags.writeable = False
    return a, b, c


def _decode_instruction(ins: Instr) -> tuple:
    """The decoded entry of a checked instruction (the instruction first, the HALT flag last)."""
    unit = UNIT[ins.op]
    wait = wait_cycles(ins)
    cost = [ISSUE_CYCLES + wait, 0, 0, 0, 0 if unit is None else 1]
    if unit is not None:
        cost[_COUNTER[unit]] = wait
    operands = _mm_operands(*ins.values) if ins.op == "MM" else ins.values
    return ins, (Machine._UNITS[ins.op], operands), tuple(cost), ins.op == "HALT"


def _table(ext_words: int, spad_words: int) -> dict:
    table = _decoded.get((ext_words, spad_words))
    if table is None:
        if len(_decoded) >= _SIZES_KEPT:
            _decoded.clear()
        table = _decoded[ext_words, spad_words] = {}
    return table


def _decode_afresh(index: int, item, last: int, ext_words: int, spad_words: int, table: dict) -> tuple:
    """Check instruction ``index`` (``ProgramError`` as ``check_program`` raises it), decode it, and
    keep it when its fields are plain ints."""
    ins = check_instruction(index, item, last, ext_words, spad_words)
    entry = _decode_instruction(ins)
    if type(ins) is Instr and set(map(type, ins.values)) <= _INT:
        if len(table) >= DECODED_CACHE_ENTRIES:
            table.clear()                         # full: start afresh (cheaper than evicting one by one)
        table[ins] = entry
    return entry


def decode(program, ext_words: int = EXT_WORDS, spad_words: int = SPAD_WORDS) -> DecodedProgram:
    """``program`` checked against memories of these sizes and decoded, each instruction from the
    table when it is there.  Raises ``ProgramError`` exactly as ``ga2.limits.check_program`` does:
    at the first broken limit, before anything runs."""
    table = _table(ext_words, spad_words)
    last = len(program) - 1
    instructions, steps, costs = [], [], []
    for index, item in enumerate(program):
        try:
            entry = table.get(item) if type(item) is Instr and set(map(type, item.values)) <= _INT else None
        except TypeError:       # values that are not a tuple, an unhashable op: the check says what
            entry = None
        if entry is None:
            entry = _decode_afresh(index, item, last, ext_words, spad_words, table)
            item = entry[0]
        elif entry[3] and index != last:          # a HALT before the end: the check names it
            check_instruction(index, item, last, ext_words, spad_words)
        instructions.append(item)
        steps.append(entry[1])
        costs.append(entry[2])
    check_ends_with_halt(instructions, len(program))
    return DecodedProgram(instructions, steps, CycleCounts(*map(sum, zip(*costs))))


def to_words(values, size: int) -> np.ndarray:
    """A memory of ``size`` words (int32) holding ``values`` (taken mod 2^32), zero-padded."""
    memory = np.zeros(size, dtype=np.int32)
    if values is None:
        return memory
    if isinstance(values, np.ndarray) and values.dtype == np.int32:
        words = values.ravel()        # already words: mod 2^32 changes nothing (a decode loop's EXT)
    else:
        words = np.asarray(values, dtype=np.int64).ravel()
    if words.size > size:
        raise ValueError(f"{words.size} initial words do not fit a memory of {size} words")
    if words.dtype == np.int32:
        memory[:words.size] = words
    else:
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
        decoded = decode(program, self.ext.size, self.spad.size)
        if trace is None:
            for unit, operands in decoded.steps:
                unit(self, *operands)
        else:
            for index, (ins, (unit, operands)) in enumerate(zip(decoded.instructions, decoded.steps)):
                unit(self, *operands)
                trace(index, ins, self)
        self.counters = self.counters + decoded.counts
        return self

    # ---------------------------------------------------------------- the units
    def _load(self, dst, src, n):
        """LD: SPAD[dst+i] = EXT[src+i], i < n."""
        self.spad[dst:dst + n] = self.ext[src:src + n]

    def _store(self, src, dst, n):
        """ST: EXT[dst+i] = SPAD[src+i], i < n."""
        self.ext[dst:dst + n] = self.spad[src:src + n]

    def _matmul(self, a, b, c):
        """MM: SPAD[dst + i*ldc + j] = sum_k a[i][k] * b[k][j]   (int8 x int8 -> int32).

        a[i][k] = SPAD[A + i*lda + k]                         (M, K)
        b[k][j] = SPAD[B + k*ldb + j]   (tb = 0)              (K, N)
                  SPAD[B + j*ldb + k]   (tb = 1: rows of B read as columns, e.g. the key cache)

        Called with the decoded offsets (``_mm_operands``): ``a`` and ``b`` index the low bytes,
        ``c`` the words of C (or its rows, in order, when they overlap).
        """
        low = self._spad_bytes
        # int8 operands widened to int32: |c| <= K * 128 * 128 = 2^20, exact (the array's int32 sums)
        product = np.dot(low[a].astype(np.int32), low[b].astype(np.int32))          # (M, N)
        if type(c) is tuple:
            for i, row in enumerate(c):
                self.spad[row] = product[i]
        else:
            self.spad[c] = product

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
