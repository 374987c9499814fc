"""kvcache.calculator: drive the widget by setting its values and check what it shows."""
import re

import matplotlib

matplotlib.use("Agg")

import ipywidgets as W  # noqa: E402
import pytest  # noqa: E402

from kvcache.calculator import (CacheCalculator, calculate, memory_segments, presets_figure,  # noqa: E402
                                svg_bar)
from kvcache.memory import GB, GIB  # noqa: E402


def shown(calc):
    """The summary table as {label: text shown}, tags stripped."""
    cells = re.findall(r"<td[^>]*>(.*?)</td>", calc.summary.value)
    clean = [re.sub(r"<[^>]+>", "", c) for c in cells]
    return dict(zip(clean[0::2], clean[1::2]))


def cache_blocks(calc):
    return calc.chart.value.count('stroke="white"')


@pytest.fixture
def calc():
    return CacheCalculator()


def test_default_is_the_a10_example(calc):
    assert calc.model_preset.value == "7B" and calc.gpu_preset.value == "A10"
    assert (calc.layers.value, calc.kv_heads.value, calc.head_dim.value, calc.tokens.value) == (32, 32, 128, 4096)
    r = calc.result
    assert r["bytes_per_token"] == 524_288 and r["bytes_per_sequence"] == 2 * GIB
    assert r["gpu_bytes"] == 24 * GB and r["weight_bytes"] == 14 * GB
    assert r["max_tokens"] == 19_073 and r["max_batch"] == 4
    s = shown(calc)
    assert s["cache per token"] == "524,288 bytes (512 KiB)"
    assert s["cache per sequence of 4,096 tokens"] == "2,147,483,648 bytes (2 GiB)"
    assert s["tokens that fit"] == "19,073"
    assert s["sequences that fit (batch)"] == "4"
    assert cache_blocks(calc) == 4
    assert calc.chart.value.startswith("<svg")


def test_int8_cache_and_shorter_sequences(calc):
    calc.bytes_per_value.value = 1
    assert calc.result["max_batch"] == 9 and shown(calc)["sequences that fit (batch)"] == "9"
    calc.bytes_per_value.value = 2
    calc.tokens.value = 2048
    assert calc.result["bytes_per_sequence"] == GIB and calc.result["max_batch"] == 9
    assert "cache per sequence of 2,048 tokens" in shown(calc)


def test_editing_a_field_makes_the_model_custom(calc):
    calc.kv_heads.value = 8
    assert calc.model_preset.value == "custom"
    assert calc.result["bytes_per_token"] == 131_072
    calc.bytes_per_value.value = 1
    assert calc.result["max_batch"] == 37
    calc.model_preset.value = "7B"      # a model preset sets the shape, not the cache's number type
    assert calc.kv_heads.value == 32 and calc.bytes_per_value.value == 1 and calc.result["max_batch"] == 9


def test_seventy_b_does_not_fit_anywhere(calc):
    calc.model_preset.value = "70B-GQA"
    assert calc.result["bytes_per_token"] == 327_680
    for gpu in ("T4", "A10", "A100"):
        calc.gpu_preset.value = gpu
        assert calc.result["max_batch"] == 0 and not calc.result["weights_fit"]
        assert "do not fit" in shown(calc)["sequences that fit (batch)"]
        assert cache_blocks(calc) == 0


def test_gpu_presets(calc):
    calc.gpu_preset.value = "A100"
    assert calc.result["max_batch"] == 30
    calc.gpu_preset.value = "T4"
    assert calc.result["max_batch"] == 0 and calc.result["weights_fit"]
    assert shown(calc)["left for caches"].startswith("2,000,000,000 bytes")


def test_unit_switch_keeps_preset_bytes(calc):
    calc.unit.value = "GiB"
    assert calc.gpu_memory.value == pytest.approx(24e9 / GIB)
    assert calc.result["gpu_bytes"] == 24 * GB and calc.result["max_batch"] == 4
    assert calc.gpu_preset.value == "A10" and calc.model_preset.value == "7B"


def test_custom_memory_in_gib_gives_20480_tokens(calc):
    calc.unit.value = "GiB"
    calc.weights.value = 0
    calc.gpu_memory.value = 10
    assert calc.model_preset.value == "custom" and calc.gpu_preset.value == "custom"
    assert calc.result["gpu_bytes"] == 10 * GIB
    assert calc.result["max_tokens"] == 20_480 and calc.result["max_batch"] == 5
    assert calc.result["left_bytes"] == 0
    assert shown(calc)["tokens that fit"] == "20,480"


def test_custom_memory_in_gb(calc):
    calc.weights.value = 0
    calc.gpu_memory.value = 10
    assert calc.result["max_tokens"] == 19_073 and calc.result["max_batch"] == 4


def test_budget_exercise_through_the_widget(calc):
    calc.unit.value = "GiB"
    calc.weights.value = 0
    calc.gpu_memory.value = 16
    calc.tokens.value = 2048
    assert calc.result["max_batch"] == 16
    calc.bytes_per_value.value = 1
    assert calc.result["max_batch"] == 32
    calc.bytes_per_value.value = 2
    calc.layers.value, calc.kv_heads.value = 80, 8
    assert calc.result["max_batch"] == 25


def test_widget_is_displayable(calc):
    assert isinstance(calc.widget, W.VBox)
    bundle = calc._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_calculate_and_segments():
    r = calculate(32, 32, 128, 4096, 2, 24 * GB, 14 * GB)
    assert sum(size for _, size in memory_segments(r)) == 24 * GB
    r0 = calculate(80, 8, 128, 4096, 2, 80 * GB, 140 * GB)
    assert memory_segments(r0) == [("weights", 140 * GB)]
    assert "<line" in svg_bar(r0)


def test_presets_figure():
    fig = presets_figure()
    ax1, ax2 = fig.axes[:2]
    labels = [t.get_text() for t in ax2.get_yticklabels()]
    assert len(labels) == 9 and "7B-class on A10" in labels
    texts = [t.get_text() for t in ax2.texts]
    assert "batch 4" in texts and "batch 30" in texts and "batch 0" in texts
    assert sum("do not fit" in t for t in texts) == 3
    assert ax1.get_xlabel() and ax2.get_xlabel()
    import matplotlib.pyplot as plt
    plt.close(fig)
