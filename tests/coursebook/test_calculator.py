"""coursebook.widgets.calculator in JupyterLab terms: set the widget's traits, read what it computes.

A notebook drives the calculator by setting its fields (traits) and reads ``result`` and
``summary()``; JupyterLab's front end sends the reader's changes as widget state messages,
which ``set_state`` applies here as it does in a kernel.  The browser side (calculator.js) is
tested on the built site (tests/site/test_calculator_page.py) and in JupyterLab
(tests/site/test_jupyterlab.py).
"""
import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import traitlets  # noqa: E402
from ipywidgets.embed import embed_data  # noqa: E402

from coursebook.widgets.calculator import (CacheCalculator, calculate, memory_segments, preset_amount,  # noqa: E402
                                presets_figure, summary_rows, to_bytes)
from lessons.memory import GB, GIB  # noqa: E402


@pytest.fixture
def calc():
    return CacheCalculator()


def shown(calc):
    return dict(calc.summary())


def test_default_is_the_a10_example(calc):
    assert calc.model_preset == "7B" and calc.gpu_preset == "A10" and calc.unit == "GB"
    assert (calc.layers, calc.kv_heads, calc.head_dim, calc.tokens) == (32, 32, 128, 4096)
    assert (calc.weights, calc.gpu_memory) == (14.0, 24.0)
    r = calc.result
    assert r["bytes_per_token"] == 524_288 and r["bytes_per_sequence"] == 2 * GIB
    assert r["gpu_bytes"] == 24 * GB and r["weight_bytes"] == 14 * GB
    assert r["max_tokens"] == 19_073 and r["max_batch"] == 4
    s = shown(calc)
    assert s["cache per token"] == "524,288 bytes (512 KiB)"
    assert s["cache per sequence of 4,096 tokens"] == "2,147,483,648 bytes (2 GiB)"
    assert s["GPU memory"] == "24,000,000,000 bytes (24.00 GB)"
    assert s["tokens that fit"] == "19,073"
    assert s["sequences that fit (batch)"] == "4"


def test_int8_cache_and_shorter_sequences(calc):
    calc.bytes_per_value = 1
    assert calc.result["max_batch"] == 9 and shown(calc)["sequences that fit (batch)"] == "9"
    calc.bytes_per_value = 2
    calc.tokens = 2048
    assert calc.result["bytes_per_sequence"] == GIB and calc.result["max_batch"] == 9
    assert "cache per sequence of 2,048 tokens" in shown(calc)


def test_editing_a_field_makes_the_model_custom(calc):
    calc.kv_heads = 8
    assert calc.model_preset == "custom"
    assert calc.result["bytes_per_token"] == 131_072
    calc.bytes_per_value = 1
    assert calc.result["max_batch"] == 37
    calc.model_preset = "7B"      # a model preset sets the shape, not the cache's number type
    assert calc.kv_heads == 32 and calc.bytes_per_value == 1 and calc.result["max_batch"] == 9


def test_setting_a_preset_value_again_keeps_the_preset(calc):
    calc.layers = 32
    calc.weights = 14.0
    assert calc.model_preset == "7B"


def test_seventy_b_does_not_fit_anywhere(calc):
    calc.model_preset = "70B-GQA"
    assert (calc.layers, calc.kv_heads, calc.weights) == (80, 8, 140.0)
    assert calc.result["bytes_per_token"] == 327_680
    for gpu in ("T4", "A10", "A100"):
        calc.gpu_preset = gpu
        assert calc.result["max_batch"] == 0 and not calc.result["weights_fit"]
        assert "do not fit" in shown(calc)["sequences that fit (batch)"]
        assert "left for caches" not in shown(calc)


def test_gpu_presets(calc):
    calc.gpu_preset = "A100"
    assert calc.gpu_memory == 80.0 and calc.result["max_batch"] == 30
    calc.gpu_preset = "T4"
    assert calc.result["max_batch"] == 0 and calc.result["weights_fit"]
    assert shown(calc)["left for caches"].startswith("2,000,000,000 bytes")


def test_the_unit_switch_reads_the_same_numbers_in_the_other_unit(calc):
    """The chapter's point: 24 - 14 = 10 GB leaves a batch of 4 sequences of 4,096 tokens
    (2 GiB each); the same numbers read as GiB leave 10 GiB, exactly 5 of them."""
    per_sequence = 2 * 32 * 32 * 128 * 4096 * 2
    assert calc.result["spare_bytes"] == 10 * 10**9 and calc.result["max_batch"] == 4
    calc.unit = "GiB"
    assert (calc.gpu_memory, calc.weights) == (24.0, 14.0), "the fields keep their numbers"
    assert calc.result["gpu_bytes"] == 24 * 2**30 and calc.result["weight_bytes"] == 14 * 2**30
    assert calc.result["spare_bytes"] == 10 * 2**30 == 5 * per_sequence
    assert calc.result["max_batch"] == 5 and calc.result["left_bytes"] == 0
    assert calc.gpu_preset == "custom" and calc.model_preset == "custom", "24 GiB is not an A10's 24 GB"
    assert shown(calc)["GPU memory"] == "25,769,803,776 bytes (24.00 GiB)"
    assert shown(calc)["sequences that fit (batch)"] == "5"
    calc.unit = "GB"
    assert (calc.gpu_memory, calc.weights) == (24.0, 14.0) and calc.result["max_batch"] == 4
    assert calc.result["gpu_bytes"] == 24 * 10**9


def test_a_preset_chosen_in_gib_shows_two_decimals_and_counts_its_exact_bytes(calc):
    calc.unit = "GiB"
    calc.gpu_preset = "A10"
    calc.model_preset = "7B"
    assert (calc.gpu_memory, calc.weights) == (22.35, 13.04)   # 24e9 / 2**30 = 22.3517..., 14e9 / 2**30 = 13.0385...
    assert calc.result["gpu_bytes"] == 24 * 10**9 and calc.result["weight_bytes"] == 14 * 10**9
    assert calc.result["max_batch"] == 4
    assert shown(calc)["GPU memory"] == "24,000,000,000 bytes (22.35 GiB)"
    assert shown(calc)["weights"] == "14,000,000,000 bytes (13.04 GiB)"
    calc.weights = 13.04          # typing what the field shows keeps the preset
    assert calc.model_preset == "7B" and calc.result["weight_bytes"] == 14 * 10**9
    calc.gpu_memory = 22.351      # another number is the reader's own
    assert calc.gpu_preset == "custom" and calc.result["gpu_bytes"] == round(22.351 * 2**30)
    calc.layers = 33              # the model is custom: the weights are now the field's 13.04 GiB
    assert calc.model_preset == "custom" and calc.result["weight_bytes"] == round(13.04 * 2**30)
    calc.unit = "GB"              # and the switch keeps the numbers the fields show
    assert (calc.gpu_memory, calc.weights) == (22.351, 13.04)
    assert calc.result["gpu_bytes"] == 22_351_000_000 and calc.result["weight_bytes"] == 13_040_000_000


def test_preset_amount_rounds_as_python_does():
    assert preset_amount(24 * 10**9, "GiB") == 22.35 and preset_amount(80 * 10**9, "GiB") == 74.51
    assert preset_amount(24 * 10**9, "GB") == 24 and preset_amount(140 * 10**9, "GiB") == 130.39
    assert preset_amount(2**30 // 8, "GiB") == 0.12       # 0.125: a tie, to the even neighbour
    assert preset_amount(3 * 2**30 // 8, "GiB") == 0.38   # 0.375: a tie, to the even neighbour


def test_custom_memory_keeps_its_number_when_the_unit_changes(calc):
    calc.gpu_memory = 10
    calc.unit = "GiB"
    assert calc.gpu_memory == 10 and calc.result["gpu_bytes"] == 10 * GIB and calc.gpu_preset == "custom"


def test_custom_memory_in_gib_gives_20480_tokens(calc):
    calc.unit = "GiB"
    calc.weights = 0
    calc.gpu_memory = 10
    assert calc.model_preset == "custom" and calc.gpu_preset == "custom"
    assert calc.result["gpu_bytes"] == 10 * GIB
    assert calc.result["max_tokens"] == 20_480 and calc.result["max_batch"] == 5
    assert calc.result["left_bytes"] == 0
    assert shown(calc)["tokens that fit"] == "20,480"


def test_budget_exercise_through_the_widget(calc):
    calc.unit = "GiB"
    calc.weights = 0
    calc.gpu_memory = 16
    calc.tokens = 2048
    assert calc.result["max_batch"] == 16
    calc.bytes_per_value = 1
    assert calc.result["max_batch"] == 32
    calc.bytes_per_value = 2
    calc.layers, calc.kv_heads = 80, 8
    assert calc.result["max_batch"] == 25


@pytest.mark.parametrize("name, value", [("layers", 0), ("layers", 10_001), ("kv_heads", -1), ("head_dim", 100_001),
                                         ("tokens", 0), ("gpu_memory", -1.0), ("weights", 2e6),
                                         ("gpu_memory", math.nan), ("bytes_per_value", 3), ("unit", "MB"),
                                         ("model_preset", "13B"), ("gpu_preset", "H100")])
def test_bad_values_are_refused_and_nothing_is_lost(calc, name, value):
    words = {"layers": "layers L", "kv_heads": "KV heads G", "head_dim": "head size d", "tokens": "tokens T",
             "gpu_memory": "GPU memory", "weights": r"weights \(fp16\)", "bytes_per_value": "bytes per value"}
    before = {n: getattr(calc, n) for n in calc._repr_traits}
    result = dict(calc.result)
    with pytest.raises(traitlets.TraitError, match=words.get(name, name)):
        setattr(calc, name, value)
    assert {n: getattr(calc, n) for n in calc._repr_traits} == before and calc.result == result


def test_a_field_is_refused_with_its_label(calc):
    with pytest.raises(traitlets.TraitError, match=r"layers L must be a whole number from 1 to 10,000"):
        calc.layers = 0
    with pytest.raises(traitlets.TraitError, match=r"GPU memory must be an amount from 0 to 1,000,000"):
        calc.gpu_memory = 1e7


def test_the_readers_changes_arrive_as_jupyterlab_sends_them(calc):
    """calculator.js sends each change with the preset it implies, in one message."""
    calc.set_state({"layers": 80, "model_preset": "custom"})
    assert calc.layers == 80 and calc.model_preset == "custom" and calc.result["bytes_per_token"] == 1_310_720
    calc.set_state({"model_preset": "70B-GQA", "layers": 80, "kv_heads": 8, "head_dim": 128, "weights": 140.0})
    assert calc.model_preset == "70B-GQA" and calc.result["max_batch"] == 0
    calc.set_state({"unit": "GiB", "model_preset": "custom", "gpu_preset": "custom"})   # the unit switch
    assert calc.unit == "GiB" and (calc.weights, calc.gpu_memory) == (140.0, 24.0)
    assert calc.result["weight_bytes"] == 140 * GIB and calc.result["gpu_bytes"] == 24 * GIB
    calc.set_state({"gpu_preset": "A100", "gpu_memory": 74.51})
    assert calc.gpu_preset == "A100" and calc.result["gpu_bytes"] == 80 * GB
    calc.set_state({"gpu_preset": "custom", "gpu_memory": 200})
    assert calc.result["gpu_bytes"] == 200 * GIB
    assert calc.result["max_batch"] == (200 * 2**30 - 140 * 2**30) // (2 * 80 * 8 * 128 * 4096 * 2) == 48


def test_the_saved_state_carries_the_module(calc):
    """What a saved page needs: the module, its styles, the presets; nothing to fetch."""
    data = embed_data(views=[calc], drop_defaults=False)
    state = data["manager_state"]["state"][calc.model_id]
    assert state["model_module"] == "anywidget" and state["model_name"] == "AnyModel"
    s = state["state"]
    assert "export default" in s["_esm"] and "course-widgets, inlined" in s["_esm"]
    assert ".cw-widget" in s["_css"]
    assert s["config"]["models"]["7B"] == {"name": "7B-class", "layers": 32, "kv_heads": 32, "head_dim": 128,
                                           "weight_bytes": 14 * GB}
    assert s["config"]["gpus"]["A100"]["memory_bytes"] == 80 * GB
    assert (s["layers"], s["model_preset"], s["unit"]) == (32, "7B", "GB")
    assert "application/vnd.jupyter.widget-view+json" in calc._repr_mimebundle_()[0]
    assert repr(calc).startswith("CacheCalculator(model_preset='7B', layers=32")


def test_to_bytes_rounds_as_python_does():
    assert to_bytes(24, "GB") == 24 * GB and to_bytes(22.351741790771484, "GiB") == 24 * GB
    assert to_bytes(0.5 / GIB, "GiB") == 0 and to_bytes(1.5 / GIB, "GiB") == 2     # ties to even


def test_calculate_and_segments():
    r = calculate(32, 32, 128, 4096, 2, 24 * GB, 14 * GB)
    assert sum(size for _, size in memory_segments(r)) == 24 * GB
    r0 = calculate(80, 8, 128, 4096, 2, 80 * GB, 140 * GB)
    assert memory_segments(r0) == [("weights", 140 * GB)]
    assert summary_rows(r0, 4096, "GB")[-1] == ("sequences that fit (batch)",
                                                "0: the weights alone do not fit in this GPU")


def test_exact_past_two_to_the_53(calc):
    calc.layers, calc.kv_heads, calc.head_dim, calc.tokens, calc.bytes_per_value = 10_000, 10_000, 100_000, \
        100_000_000, 4
    assert calc.result["bytes_per_sequence"] == 8 * 10**21
    assert shown(calc)["cache per sequence of 100,000,000 tokens"].startswith("8,000,000,000,000,000,000,000 bytes")


def test_presets_figure():
    """Every model on every GPU, one panel per model, drawn to the text column's width with
    labels large enough to read there, and without a layout warning."""
    import warnings

    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = presets_figure()
        fig.canvas.draw()
    try:
        assert tuple(fig.get_size_inches()) == (6.9, 4.9)
        assert len(fig.axes) == 3
        titles = [ax.get_title(loc="left") for ax in fig.axes]
        assert titles[1] == "7B-class: 14 GB of weights, 2 GiB of cache per sequence"
        assert [t.get_text() for t in fig.axes[1].get_yticklabels()] == ["T4 (16 GB)", "A10 (24 GB)", "A100 (80 GB)"]
        batches = [[t.get_text() for t in ax.texts] for ax in fig.axes]
        # batches of 4,096-token fp16 caches beside fp16 weights, from the GPUs' and models' sizes
        assert batches[0] == [f"batch {(gpu - 2 * 10**9) // (2 * 16 * 16 * 64 * 4096 * 2)}"
                              for gpu in (16 * 10**9, 24 * 10**9, 80 * 10**9)] == ["batch 52", "batch 81", "batch 290"]
        assert batches[1] == ["batch 0", "batch 4", "batch 30"]
        assert batches[2] == ["weights do not fit"] * 3
        # the 7B's 4 and 30 sequences of 2 GiB are drawn one block each; the 1B's 256 MiB ones, one
        # block per GPU; nothing of a cache where none fits
        cache_colour = matplotlib.colors.to_rgba("#dd8452")
        blocks = [sum(p.get_facecolor() == cache_colour for p in ax.patches) for ax in fig.axes]
        assert blocks == [3, 4 + 30, 0]
        lo, hi = fig.axes[-1].get_xlim()
        ticks = [t for t in fig.axes[-1].get_xticklabels() if lo <= t.get_position()[0] <= hi]
        texts = [t for ax in fig.axes for t in (*ax.texts, *ax.get_yticklabels())] + ticks
        assert [t.get_text() for t in ticks] == ["0", "20", "40", "60", "80", "100", "120", "140"]
        assert min(t.get_fontsize() for t in texts) >= 9
        # nothing drawn outside the figure
        box = fig.bbox
        renderer = fig.canvas.get_renderer()
        for t in texts + [fig.legends[0]]:
            extent = t.get_window_extent(renderer)
            assert extent.x0 >= box.x0 - 1 and extent.x1 <= box.x1 + 1, t
    finally:
        plt.close(fig)
