"""One forward step, planned once: where every new token goes, and whether the step is a decode.

``KVCache.reserve(counts)`` checks that the step fits, makes room for it, and returns a frozen
``StepPlan`` that every layer's ``update`` and ``attend`` receive (as vLLM hands its attention
backend one metadata object per step).  Layers keep no state about the step between the two
calls: everything they need to write and read is here.

For B sequences with starts[b] tokens cached and counts[b] >= 1 new ones, N = sum(counts)::

    counts      (B,)     new tokens of each sequence (packed in this order: row 0's first)
    starts      (B,)     tokens cached before the step: row b writes positions starts[b] ..
    ends        (B,)     starts + counts: tokens cached after it, what attention reads
    offsets     (B + 1,) row b's tokens are q[offsets[b] : offsets[b + 1]]
    positions   (N,)     the position of each new token (its rotary angle)
    is_decode   bool     every count is 1 (then N = B and positions = starts): the rule, once

A paged cache adds where the N tokens land and what its attention gathers::

    slot_blocks, slot_offsets   (N,)            block and slot of each new token
    table                       (B, n) int64    every table's first n = ceil(max(ends) / bs)
                                                blocks, padded with block 0 (masked by ends)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

__all__ = ["StepPlan", "plan_step"]


def _read_only(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class StepPlan:
    """A reserved step (see the module doc); its arrays are read-only."""

    counts: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    offsets: np.ndarray
    positions: np.ndarray
    is_decode: bool
    slot_blocks: np.ndarray | None = None
    slot_offsets: np.ndarray | None = None
    table: np.ndarray | None = None

    @property
    def batch(self) -> int:
        return len(self.counts)

    @property
    def tokens(self) -> int:
        """N: the new tokens of the step."""
        return int(self.offsets[-1])

    @cached_property
    def context(self) -> int:
        """The longest sequence after the step: max(ends).  Computed once per plan (every layer's
        attend asks, and the reduction costs a few microseconds each time)."""
        return int(self.ends.max(initial=0))

    def with_slots(self, table: np.ndarray, slot_blocks: np.ndarray, slot_offsets: np.ndarray) -> "StepPlan":
        """This plan with a paged cache's gather table and the slot of every new token."""
        return replace(self, table=_read_only(table), slot_blocks=_read_only(slot_blocks),
                       slot_offsets=_read_only(slot_offsets))


def plan_step(counts: np.ndarray, starts: np.ndarray) -> StepPlan:
    """The plan of a step of checked ``counts`` (int64 (B,), each >= 1) over sequences holding
    ``starts`` tokens (a paged cache adds its slots with ``with_slots``)."""
    counts = _read_only(np.array(counts, np.int64))
    starts = _read_only(np.array(starts, np.int64))
    is_decode = bool(len(counts)) and bool(np.all(counts == 1))
    if is_decode:
        positions = starts
    elif len(counts):
        positions = np.concatenate([np.arange(s, s + n) for s, n in zip(starts.tolist(), counts.tolist())])
    else:
        positions = np.zeros(0, np.int64)
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return StepPlan(counts=counts, starts=starts, ends=_read_only(starts + counts),
                    offsets=_read_only(offsets), positions=_read_only(np.asarray(positions, np.int64)),
                    is_decode=is_decode)
