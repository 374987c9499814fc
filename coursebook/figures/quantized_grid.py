"""Chapter 13's grid of quantized caches as one figure: what each keeps against what it loses.

``draw_grid`` puts every configuration at its cache bytes per token (x) against its mean KL from
the full float32 cache (left) and the perplexity it adds to float32's (right, with the 0.1 line
KVQuant's claim is stated against).  The marker says how the keys are quantized (per token or
per channel, before or after RoPE); a filled marker keeps the full-precision window and first
token, an open one keeps nothing.  At each width the four ways of quantizing the keys keep the same
bytes: they are drawn side by side (``DODGE``), not on top of one another.
"""
from __future__ import annotations

__all__ = ["draw_grid", "KEY_STYLES", "DODGE"]

#: Caches of one width keep the same bytes whichever way their keys are quantized: each way is
#: drawn this share of its bytes to the side of the next, so that none hides another.
DODGE = 0.012

#: (keys per, quantized before RoPE) -> (marker, colour, label)
KEY_STYLES = {("token", False): ("o", "#b5452b", "keys per token, after RoPE"),
              ("token", True): ("s", "#e08a3c", "keys per token, before RoPE"),
              ("channel", False): ("^", "#3b6ea5", "keys per channel, after RoPE"),
              ("channel", True): ("D", "#2a8c5a", "keys per channel, before RoPE")}


def draw_grid(configs, judged, full, margin: float = 0.1, width: float = 7.6):
    """configs and their judgements (``lessons.harness.Judgement``) side by side; ``full`` the
    float32 cache's judgement.  Two panels sharing the bytes axis."""
    import matplotlib.pyplot as plt

    fig, (kl_ax, ppl_ax) = plt.subplots(1, 2, figsize=(width, 4.6), sharex=True)
    for i, ((per, pre), (marker, colour, label)) in enumerate(KEY_STYLES.items()):
        dodge = 1 + DODGE * (i - (len(KEY_STYLES) - 1) / 2)        # side by side, not on top of each other
        for kept in (True, False):
            points = [(j.bytes_per_token * dodge, j.kl_mean, j.perplexity - full.perplexity)
                      for c, j in zip(configs, judged)
                      if c.per == per and c.pre_rope == pre and c.window == kept and c.sink == kept]
            if not points:
                continue
            x, kl, added = zip(*points)
            style = dict(marker=marker, linestyle="none", markersize=6, markeredgecolor=colour,
                         markerfacecolor=colour if kept else "none",
                         label=label + (" + window and first token" if kept else ", nothing kept"))
            kl_ax.plot(x, kl, **style)
            ppl_ax.plot(x, added, **style)
    kl_ax.set_yscale("log")
    kl_ax.set_ylabel("mean KL from float32")
    ppl_ax.set_yscale("symlog", linthresh=0.01)
    ppl_ax.axhline(margin, color="#555555", linestyle="--", linewidth=0.9)
    ppl_ax.text(0.02, margin, f" +{margin}", transform=ppl_ax.get_yaxis_transform(), va="bottom",
                fontsize=8, color="#555555")
    ppl_ax.set_ylabel("perplexity - float32's")
    for ax in (kl_ax, ppl_ax):
        ax.xaxis.set_major_formatter(lambda value, _: f"{value:,.0f}")
        ax.set_xlabel("cache bytes per token")
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = kl_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=7.5, frameon=False)
    return fig
