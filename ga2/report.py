"""The published chapter's tables, printed from the model: ``python -m ga2``.

1. the cached program for L = 3, as assembled
2. what the KV cache saves: the counters of both programs at L = 2, 4, 8, 16, 32
3. where the cycles of one cached step go at L = 32
4. one step at each context length t = 1..32, and the cost of generating 32 tokens

The data come from ``ga2.attn`` (``program``, ``cycle_table``, ``cycle_breakdown``,
``generation_cost``); this module only formats them, so chapters can draw the same
numbers as figures.
"""
from __future__ import annotations

import sys

from . import attn
from .listing import format_listing

__all__ = ["listing_text", "cycle_table_text", "breakdown_text", "generation_text", "main"]

EXAMPLE_B_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def listing_text(L: int = 3, seed: int = 1) -> str:
    """The numbered listing of the cached program at L, and both programs' lengths."""
    P = attn.rq_params(attn.make_example(L, seed))
    cached, recompute = attn.program(L, "cached", P), attn.program(L, "recompute", P)
    return (format_listing(cached) + f"\n\n{len(cached)} instructions; the same step without a cache "
            f"('recompute') is {len(recompute)}.")


def cycle_table_text(Ls=(2, 4, 8, 16, 32)) -> str:
    """Counters of both programs at each L, and how much faster the cached step is."""
    rows = attn.cycle_table(Ls)
    lines = [f"{'L':>3s} {'program':10s} {'instr':>5s} {'total':>7s} {'matrix':>7s} {'DMA':>6s} {'vector':>7s}"
             f"  cycles saved by the cache"]
    totals = {(row.L, row.variant): row.counts.total for row in rows}
    for row in rows:
        c = row.counts
        saved = (f"{totals[(row.L, 'recompute')] / c.total:5.2f}x faster than recompute"
                 if row.variant == "cached" and (row.L, "recompute") in totals else "")
        lines.append(f"{row.L:3d} {row.variant:10s} {c.instructions:5d} {c.total:7d} {c.matrix:7d} {c.dma:6d} "
                     f"{c.vector:7d}  {saved}".rstrip())
    return "\n".join(lines)


def breakdown_text(L: int = 32) -> str:
    """Instructions and cycles per op of the cached step at L (HALT left out)."""
    rows = attn.cycle_breakdown(attn.program(L, "cached", attn.default_params()))
    total = sum(cycles for _, _, cycles in rows)
    lines = [f"  {op:5s} {n:3d} instructions {cycles:6d} cycles {100 * cycles / total:5.1f}%"
             for op, n, cycles in rows]
    return "\n".join(lines + [f"  total {total} cycles (HALT's 2 not included)"])


def generation_text(n: int = 32, shown=EXAMPLE_B_ROWS) -> str:
    """Cycles of one step at selected context lengths, and the totals of a whole generation."""
    cost = attn.generation_cost(n)
    cached, recompute = cost["cached"], cost["recompute"]
    lines = ["   t  cached  recompute  ratio"]
    lines += [f"{t:4d} {cached[t - 1]:7d} {recompute[t - 1]:10d} {recompute[t - 1] / cached[t - 1]:6.2f}"
              for t in shown if t <= n]
    lines.append(f"\ngenerating {n} tokens one after another: cached {sum(cached):,} cycles in total, "
                 f"recompute {sum(recompute):,} cycles ({sum(recompute) / sum(cached):.2f}x)")
    return "\n".join(lines)


def main(argv=None) -> int:
    print("== 1. the 'cached' program for the third token (L = 3), as assembled\n")
    print(listing_text())
    print("\n== 2. what the KV cache saves (cycle model; both programs give identical outputs at every step)\n")
    print(cycle_table_text())
    print("\n== 3. where the cycles go in one cached step at L = 32\n")
    print(breakdown_text())
    print("\n== 4. one decode step at context length t, and a whole generation\n")
    print(generation_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
