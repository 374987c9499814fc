"""coursebook.figures.quantized_grid: every cache of a grid drawn once in each panel, the four
ways of quantizing keys side by side at one width, the added perplexity on a scale that shows a
cache below float32's, and no warning from the page's layout."""
import warnings

import pytest

from coursebook.figures.quantized_grid import DODGE, KEY_STYLES, draw_grid
from lessons.harness import Judgement
from lessons.kv_quantization import Config


@pytest.fixture
def figure():
    import matplotlib
    matplotlib.use("Agg")
    from coursebook import setup
    setup()
    grid = [Config(bits, per, pre, window=kept, sink=kept) for bits in (4, 2) for per in ("token", "channel")
            for pre in (False, True) for kept in (True, False)]
    judged = [Judgement(c.name, 1000 * c.bits, 0.01 * (5 - c.bits) * (2 if c.window else 3), 0.9,
                        15.0 + (0.3 if c.window else -0.2), 255) for c in grid]
    full = Judgement("float32", 46_080, 0.0, 1.0, 15.1, 255)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = draw_grid(grid, judged, full)
    yield fig, grid, judged
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_every_cache_is_drawn_once_in_each_panel(figure):
    fig, grid, _ = figure
    kl_ax, ppl_ax = fig.axes[:2]
    for ax in (kl_ax, ppl_ax):
        assert sum(len(line.get_xdata()) for line in ax.lines if line.get_linestyle() == "None") == len(grid)
    assert len(fig.legends[0].get_texts()) == 2 * len(KEY_STYLES)
    assert ppl_ax.get_yscale() == "symlog" and kl_ax.get_yscale() == "log"


def test_the_ways_of_one_width_are_side_by_side(figure):
    fig, grid, _ = figure
    xs = sorted({round(float(x), 6) for line in fig.axes[0].lines for x in line.get_xdata()})
    at_4_bits = [x for x in xs if 3000 < x < 5000]
    assert len(at_4_bits) == len(KEY_STYLES)                       # four positions, none on another
    half = DODGE * (len(KEY_STYLES) - 1) / 2
    assert max(at_4_bits) / min(at_4_bits) == pytest.approx((1 + half) / (1 - half), rel=1e-9)
    assert sum(at_4_bits) / len(at_4_bits) == pytest.approx(4000)   # centred on the bytes they keep
