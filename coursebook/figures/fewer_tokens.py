"""Chapter 14's two figures: where SmolLM2's heads put their attention (the sinks), and
perplexity against the cache's budget, one line per eviction policy.

The chapter computes the numbers (``lessons.fewer_tokens``) and passes them here.  Like the rest
of ``coursebook``, importing this module imports neither numpy nor matplotlib.
"""
from __future__ import annotations

__all__ = ["draw_sink_mass", "draw_budget_curves"]


def draw_sink_mass(mass, uniform: float, title: str):
    """A heat map of ``mass`` (L, H): the share of attention each layer's heads give position 0,
    with the share a head spreading its attention evenly would give (``uniform``) stated beside.
    Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 3.3))
    image = ax.imshow(mass.T, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, origin="lower")
    ax.set(xlabel="layer", ylabel="query head", title=title)
    fig.colorbar(image, ax=ax, label=f"weight on position 0 (even spread: {uniform:.3f})")
    return fig


def draw_budget_curves(budgets, curves: dict, full, bytes_per_position: int):
    """Each policy's perplexity divided by the full cache's on the same tokens (log scale) against
    the budget in positions, one line per policy of ``curves`` ({name: perplexities, one per
    budget}), ``full`` the full cache's perplexities (one per budget); 1, the full cache, dashed;
    the budgets' cache bytes label the top axis.  Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 3.8))
    for name, values in curves.items():
        ax.plot(budgets, [v / f for v, f in zip(values, full)], marker="o", label=name)
    ax.axhline(1.0, color="black", ls="--", lw=1, label="full cache")
    ax.set(xscale="log", yscale="log", xlabel="budget (positions kept per layer and key/value head)",
           ylabel="perplexity / the full cache's", title="Perplexity against the cache's budget")
    ax.set_xticks(list(budgets), [str(b) for b in budgets])
    ax.minorticks_off()
    top = ax.secondary_xaxis("top")
    top.set_xticks(list(budgets), [f"{b * bytes_per_position / 2**20:.1f} MiB" for b in budgets])
    ax.legend(fontsize=8)
    return fig
