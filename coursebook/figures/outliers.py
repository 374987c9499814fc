"""Chapter 13's figures: the magnitude of every key and value channel of SmolLM2, per layer.

``draw_channel_peaks`` plots, for one layer, the largest |x| each channel reaches over a text,
for the keys before RoPE, the same keys after it, and the values; ``draw_layer_map`` shows the
keys' channels (before RoPE) for every layer at once, each layer's row divided by its median.
"""
from __future__ import annotations

__all__ = ["draw_channel_peaks", "draw_layer_map"]


def draw_channel_peaks(pre, post, values, layer: int, head_dim: int, width: float = 7.6):
    """Three panels of bars: channel index (heads side by side) against max |x| over the text."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(width, 5.6), sharex=True)
    for ax, peaks, title in zip(axes, (pre, post, values),
                                ("keys before RoPE", "keys after RoPE (as cached)", "values")):
        ax.bar(range(len(peaks)), peaks, width=1.0, color="#3b6ea5")
        for boundary in range(head_dim, len(peaks), head_dim):
            ax.axvline(boundary - 0.5, color="#999999", linewidth=0.8)
        ax.set_ylabel("max |x|")
        ax.set_title(f"layer {layer}: {title}", fontsize=10)
    axes[-1].set_xlabel(f"channel (the kv heads side by side, {head_dim} channels each)")
    return fig


def draw_layer_map(ratios, width: float = 7.6):
    """ratios (layers, channels): each channel's max |k| over its layer's median channel."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(width, 3.6))
    image = ax.imshow(np.log2(ratios), aspect="auto", cmap="magma", interpolation="nearest")
    ax.set_xlabel("key channel (before RoPE), kv heads side by side")
    ax.set_ylabel("layer")
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("log2(max |k| / the layer's median)")
    return fig
