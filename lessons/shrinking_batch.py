"""A decode step's time as sequences leave the batch (chapter 5), in words.

A step of B sequences and a step of one: the time of the second as a share of the first,
against the FLOPs' share.  A share of time within 5% of the FLOPs' falls "about as fast as the
FLOPs"; a larger one falls more slowly (a step has costs that do not shrink with the batch);
a smaller one cannot come from the step itself, and the sentence says the measurement was
disturbed.

Then where the time falls: ``one_row_sentence`` compares the step from B sequences down to 2 with
the step from 2 down to 1, and the step's matrix products alone at 2 rows and at 1.  numpy's
``@`` hands a product whose left side is one row to BLAS's matrix-vector routine (gemv) and any
other to its matrix-matrix routine (gemm): two rows cost exactly twice one row when they go as
two matrix-vector products, so the products' time at 2 rows against twice their time at 1 is
the price (or the saving) of the matrix-matrix routine itself.
"""
from __future__ import annotations

from coursebook.numbers import NOISE, change_words, within_noise

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


def _positive(**times):
    bad = {name: t for name, t in times.items() if not t > 0}
    if bad:
        raise ValueError(f"times must be positive, got {bad!r}")


def path_price_words(two_rows: float, one_row: float, noise: float = NOISE) -> str:
    """The products at 2 rows against two 1-row passes (2 x ``one_row``), as a clause: "1.7 times
    what two one-row passes cost: the matrix-matrix routine's price", "as much as ...", or
    "1.3 times less than ...: the matrix-matrix routine reads each weight once for both rows"."""
    _positive(two_rows=two_rows, one_row=one_row)
    q = two_rows / (2 * one_row)
    if within_noise(q, noise):
        return (f"as much as two one-row passes (a ratio of {q:.2f}): here the two routines cost the "
                "same per row")
    if q > 1:
        return f"{q:.1f} times what two one-row passes cost: the matrix-matrix routine's price"
    return (f"{1 / q:.1f} times less than two one-row passes: the matrix-matrix routine reads each "
            "weight once for both rows")


def one_row_sentence(batch: int, step_full: float, step_two: float, step_one: float,
                     products_two: float, products_one: float, noise: float = NOISE) -> str:
    """Where a decode step's time falls as the batch shrinks to one, in seconds measured: the step
    at ``batch``, 2 and 1 sequences; its matrix products alone at 2 rows and at 1.

    "From 6 sequences down to 2 the step's time hardly moved (9% lower), and from 2 to 1 it fell
    by 57%. The step's matrix products alone took 96.0 ms with 2 rows and 28.0 ms with 1, 1.7
    times what two one-row passes cost: the matrix-matrix routine's price. Their fall from 2 rows
    to 1, 68.0 ms, is 92% of the step's (74.0 ms)." """
    _positive(step_full=step_full, step_two=step_two, step_one=step_one,
              products_two=products_two, products_one=products_one)
    said = (f"From {batch} sequences down to 2 the step's time {change_words(step_full, step_two, noise)}, "
            f"and from 2 to 1 it {change_words(step_two, step_one, noise)}. The step's matrix products "
            f"alone took {products_two * 1e3:.1f} ms with 2 rows and {products_one * 1e3:.1f} ms with 1, "
            f"{path_price_words(products_two, products_one, noise)}. ")
    step_fall, products_fall = step_two - step_one, products_two - products_one
    if within_noise(step_one / step_two, noise) or step_fall <= 0:
        return said + "The step itself did not fall beyond the noise from 2 sequences to 1."
    if products_fall <= 0:
        return said + "The products did not fall with the step: its fall from 2 sequences to 1 is elsewhere."
    return (said + f"Their fall from 2 rows to 1, {products_fall * 1e3:.1f} ms, is "
            f"{products_fall / step_fall:.0%} of the step's ({step_fall * 1e3:.1f} ms).")
