"""The ten attention programs the circuit is checked on: cached and recompute at
L = 2, 4, 8, 16, 32.

Each is the last step of a whole decode loop (``ga2.attn.sequence``) on the example of seed 1,
drawn with the published GA-2 chapter's generator (``random.Random``), together with the EXT that step
starts from: for ``cached`` the caches the earlier steps appended, for ``recompute`` the
initial image.  The circuit must leave every word of EXT and SPAD and all five counters as
``ga2.machine`` does; their cycles add up to 53,292.
"""
from __future__ import annotations

from .. import attn
from .circuit import Case

__all__ = ["LENGTHS", "EXAMPLE_SEED", "attention_programs"]

LENGTHS = (2, 4, 8, 16, 32)
EXAMPLE_SEED = 1


def attention_programs(lengths=LENGTHS, seed: int = EXAMPLE_SEED) -> list[Case]:
    """Both programs of the last decode step at each L, labelled "L=4 cached" and so on."""
    cases = []
    for L in lengths:
        last = attn.sequence(attn.make_example(L, seed, generator="python"))[-1]
        for variant in attn.VARIANTS:
            run = last[variant]
            cases.append(Case(f"L={L} {variant}", run.program, run.ext_before))
    return cases
