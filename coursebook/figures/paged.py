"""Pictures of a paged cache's bookkeeping, for chapter 6: the pool, the block tables, the free
queue and the reference counts, step by step.

``snapshot(cache, label, names)`` records the state of a ``PagedKVCache`` (what its tables
name, how full each block is, every block's count, the free queue in order);
``draw_steps(snapshots)`` draws one row per snapshot: the pool as a strip of numbered blocks,
coloured by the sequences that hold them (a shared block carries every holder's colour and its
count), filled as far as positions are written, and below it each sequence's table and the
free queue.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Snapshot", "snapshot", "draw_steps", "SEQUENCE_COLOURS"]

SEQUENCE_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:red", "tab:brown"]


@dataclass(frozen=True)
class Snapshot:
    label: str
    names: tuple[str, ...]              # one per sequence (row)
    tables: tuple[tuple[int, ...], ...]
    lengths: tuple[int, ...]
    refs: tuple[int, ...]               # every block's reference count
    free: tuple[int, ...]               # the free queue, next handed out first
    block_size: int


def snapshot(cache, label: str, names) -> Snapshot:
    """The bookkeeping of ``cache`` now; ``names`` labels its sequences, row by row."""
    alloc = cache.allocator
    return Snapshot(label, tuple(names), tuple(tuple(t) for t in cache.block_tables),
                    tuple(int(n) for n in cache.lengths), tuple(alloc.refcount(b) for b in range(alloc.num_blocks)),
                    tuple(alloc.free_blocks()), cache.block_size)


def _fill(snap: Snapshot) -> dict[int, int]:
    """Positions written in each live block (the most any holder has written)."""
    fill: dict[int, int] = {}
    for table, length in zip(snap.tables, snap.lengths):
        for i, b in enumerate(table):
            fill[b] = max(fill.get(b, 0), min(snap.block_size, max(0, length - i * snap.block_size)))
    return fill


def draw_steps(snapshots, width: float = 7.6):
    """One row per snapshot; returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    n_blocks = len(snapshots[0].refs)
    colour_of: dict[str, str] = {}               # a sequence keeps its colour from row to row
    for snap in snapshots:
        for name in snap.names:
            colour_of.setdefault(name, SEQUENCE_COLOURS[len(colour_of) % len(SEQUENCE_COLOURS)])
    rows = len(snapshots)
    height_per = 0.55 + 0.28 * max(len(s.tables) for s in snapshots)
    fig, axes = plt.subplots(rows, 1, figsize=(width, height_per * rows + 0.3), squeeze=False)
    for ax, snap in zip(axes[:, 0], snapshots):
        fill = _fill(snap)
        holders: dict[int, list[int]] = {}
        for seq, table in enumerate(snap.tables):
            for b in table:
                holders.setdefault(b, []).append(seq)
        for b in range(n_blocks):
            ax.add_patch(Rectangle((b, 0), 0.92, 1, facecolor="white", edgecolor="0.55", lw=0.8))
            owners = holders.get(b, [])
            if owners:
                share = 0.92 / len(owners)
                level = fill.get(b, 0) / snap.block_size
                for k, seq in enumerate(owners):
                    colour = colour_of[snap.names[seq]]
                    ax.add_patch(Rectangle((b + k * share, 0), share, 1, facecolor=colour, alpha=0.18, lw=0))
                    ax.add_patch(Rectangle((b + k * share, 0), share, level, facecolor=colour, alpha=0.75, lw=0))
                ax.text(b + 0.46, 0.5, str(snap.refs[b]), ha="center", va="center", fontsize=10, weight="bold",
                        color="black")
            ax.text(b + 0.46, 1.12, f"block {b}", ha="center", va="bottom", fontsize=8, color="0.35")
        lines = [(f"{name}: table {list(table)}, {length} positions", colour_of[name])
                 for name, table, length in zip(snap.names, snap.tables, snap.lengths)]
        lines.append((f"free queue (next first): {list(snap.free)}", "0.3"))
        for k, (text, colour) in enumerate(lines):
            ax.text(0, -0.35 - 0.42 * k, text, ha="left", va="top", fontsize=9, color=colour)
        ax.set_xlim(-0.1, n_blocks + 0.1)
        ax.set_ylim(-0.45 - 0.42 * len(lines), 1.5)
        ax.set_title(snap.label, loc="left", fontsize=10)
        ax.axis("off")
    return fig
