"""A decode step's time as sequences leave the batch (chapter 5), in words.

A step of B sequences and a step of one: the time of the second as a share of the first,
against the FLOPs' share.  A share of time within 5% of the FLOPs' falls "about as fast as the
FLOPs"; a larger one falls more slowly (a step has costs that do not shrink with the batch);
a smaller one cannot come from the step itself, and the sentence says the measurement was
disturbed.
"""
from __future__ import annotations

#: How far the time's share may stray from the FLOPs' and still fall "about as fast".
AGREEMENT = 0.05


def shrinking_batch_sentence(batch: int, full_seconds: float, one_seconds: float, flop_share: float) -> str:
    """"A step of B sequences took X ms here, a step of one Y ms: S% of the time for F% of the
    FLOPs." and how the time fell against the FLOPs."""
    if not (full_seconds > 0 and one_seconds > 0 and flop_share > 0):
        raise ValueError("the times and the FLOPs' share must be positive, got "
                         f"{full_seconds!r}, {one_seconds!r}, {flop_share!r}")
    share = one_seconds / full_seconds
    said = (f"A step of {batch} sequences took {full_seconds * 1e3:.2f} ms here, a step of one "
            f"{one_seconds * 1e3:.2f} ms: {share:.0%} of the time for {flop_share:.0%} of the FLOPs. ")
    if share > flop_share * (1 + AGREEMENT):
        return said + "The time falls more slowly than the FLOPs"
    if share >= flop_share * (1 - AGREEMENT):
        return said + "The time falls about as fast as the FLOPs"
    return said + "The time falls faster than the FLOPs (a measurement disturbed by other programs on this machine)"
