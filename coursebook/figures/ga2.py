"""The cycles of one GA-2 decode step against the context length, for chapter 10: stacked bars
of what each unit takes, for the cached program beside the recomputing one, and below them the
ratio of their totals, what the cache saves.

The chapter computes the counts (``ga2.attn.cycle_table``, one row per variant and length) and
passes them here: ``cycles[variant][part]`` is an array over the lengths, one entry per length,
whose parts sum to the step's total.

Like the rest of ``coursebook``, importing this module imports neither numpy nor matplotlib.
"""
from __future__ import annotations

__all__ = ["UNIT_COLOURS", "draw_cycles_by_unit"]

# One colour per part, in the order the chapter lists them (matrix, DMA, vector, issue): the
# issue cycles, which belong to no unit, in grey.
UNIT_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#bbbbbb")


def draw_cycles_by_unit(lengths, cycles, plan_end: int, variants=("cached", "recompute")):
    """Two panels over the context length L (``lengths``): above, one step's cycles by part as
    stacked bars, the first variant's left of each L and the second's right; below, the second
    variant's total over the first's.  A dotted line on both marks where the scratchpad plan ends
    (after ``plan_end`` tokens).  Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    first, second = variants
    parts = tuple(cycles[first])
    total = {v: sum(cycles[v][part] for part in parts) for v in variants}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.4, 5.4), sharex=True, height_ratios=(3, 2))
    for offset, variant in ((-0.2, first), (0.2, second)):
        bottom = np.zeros(len(lengths))
        for part, colour in zip(parts, UNIT_COLOURS):
            ax1.bar(lengths + offset, cycles[variant][part], 0.4, bottom=bottom,
                    color=colour, label=part if variant == first else None)
            bottom += cycles[variant][part]
    ax1.set(ylabel="cycles of one step",
            title=f"One step by unit (left bars: {first}, right: {second})")
    ax1.legend()
    ax2.plot(lengths, total[second] / total[first], color="black")
    ax2.set(xlabel="context length L", ylabel=f"{second} / {first}", title="What the cache saves")
    for ax in (ax1, ax2):
        ax.axvline(plan_end + 0.5, color="tab:red", ls=":", lw=1)
        top = ax.get_ylim()[1]
        ax.text(plan_end + 1.5, 0.93 * top, "the scratchpad\nplan ends", fontsize=8, color="tab:red")
    return fig
