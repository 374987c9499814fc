"""One look for every figure and printed array of the course."""
from __future__ import annotations

# The course's figure style: the same size, type and frame in every chapter.  Layout is
# constrained (no tight_layout calls in the chapters); the top and right frame lines are off.
FIGURE_STYLE = {
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 100,
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "legend.fontsize": 9,
    "image.cmap": "viridis",
}

PRINT_OPTIONS = {"precision": 4, "suppress": True}


def setup() -> None:
    """Apply the course's figure style and numpy's print options (in a chapter's first cell)."""
    import matplotlib.pyplot as plt
    import numpy as np

    plt.rcdefaults()
    plt.rcParams.update(FIGURE_STYLE)
    np.set_printoptions(**PRINT_OPTIONS)
