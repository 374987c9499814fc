"""The GA-2 cycle model: what the five counters read after a program.

Every instruction costs ``ISSUE_CYCLES`` (2) to issue, plus a wait that depends on
its op and fields::

    LD     len + 9
    ST     len + 2
    MM     M*K + K*N + M*N + M + K + N + 5    (staging A and B, the array, draining C)
    RQ     len + 2
    SM     3*len + 47                         (max, table look-up and sum, divide)
    HALT   0

Counters::

    total         every cycle, HALT's 2 issue cycles included
    matrix        MM waits
    dma           LD and ST waits
    vector        RQ and SM waits
    instructions  instructions executed, HALT not counted

The model depends on the fields only, never on data, so it can price a program
without running it (and without checking it fits in memory: the cycle model
"does not mind" a context longer than the scratchpad holds).
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import NamedTuple

from .instructions import as_instr

__all__ = ["ISSUE_CYCLES", "UNIT", "CycleCounts", "wait_cycles", "instruction_cycles", "cycle_counts"]

ISSUE_CYCLES = 2

#: Which counter each op's wait goes to (HALT waits for nothing).
UNIT = {"LD": "dma", "ST": "dma", "MM": "matrix", "RQ": "vector", "SM": "vector", "HALT": None}


class CycleCounts(NamedTuple):
    """The five counters of one run."""

    total: int
    matrix: int
    dma: int
    vector: int
    instructions: int

    def __add__(self, other):  # counters of consecutive runs add up field by field
        return CycleCounts(*(a + b for a, b in zip(self, other)))


def wait_cycles(ins) -> int:
    """Cycles ``ins`` waits after issue (the table in the module docstring)."""
    ins = as_instr(ins)
    op, f = ins.op, ins.fields
    if op == "LD":
        return f["len"] + 9
    if op in ("ST", "RQ"):
        return f["len"] + 2
    if op == "MM":
        M, K, N = f["M"], f["K"], f["N"]
        return M * K + K * N + M * N + M + K + N + 5
    if op == "SM":
        return 3 * f["len"] + 47
    if op == "HALT":
        return 0
    raise ValueError(f"no cycle model for operation {op!r}")


def instruction_cycles(ins) -> int:
    """All the cycles of one instruction: issue plus wait."""
    return ISSUE_CYCLES + wait_cycles(ins)


@lru_cache(maxsize=1 << 16)
def _cost(ins) -> tuple:
    """(counter, wait) of one instruction; cached, as the same instructions recur."""
    return UNIT[ins.op], wait_cycles(ins)


def cycle_counts(program) -> CycleCounts:
    """The counters after running ``program`` once, from the cycle model alone."""
    units = Counter()
    total = instructions = 0
    for item in program:
        ins = as_instr(item)
        try:
            unit, wait = _cost(ins)
        except TypeError:  # unhashable field values: price it without the cache
            unit, wait = UNIT.get(ins.op), wait_cycles(ins)
        total += ISSUE_CYCLES + wait
        if unit is not None:
            instructions += 1
            units[unit] += wait
    return CycleCounts(total, units["matrix"], units["dma"], units["vector"], instructions)
