"""The cache calculator of Chapter 3: an ipywidgets form and the same numbers as a figure.

``CacheCalculator()`` shows a form (a model preset, layers, KV heads, head size, tokens per
sequence, bytes per value; a GPU preset, its memory and the weights' size) and, below it, the
cache per token, the cache per sequence, how many tokens and whole sequences fit beside the
weights, and a bar of the GPU's memory split into weights, caches and what is left.

Every number it shows comes from ``kvcache.memory``; ``calculate`` is the same arithmetic
without the widgets, and ``presets_figure`` draws the presets with matplotlib for pages that
cannot run widgets.  A test (or a reader) drives the widget by setting values::

    calc = CacheCalculator()
    calc.layers.value = 80
    calc.result["max_batch"], calc.summary.value
"""
from __future__ import annotations

import html
from contextlib import contextmanager

import ipywidgets as W

from .memory import GB, GIB, MODELS, format_bytes, kv_cache_bytes, max_batch, max_tokens
from .roofline import GPUS

__all__ = ["UNITS", "BYTES_PER_VALUE", "calculate", "memory_segments", "svg_bar", "CacheCalculator",
           "presets_figure"]

UNITS = {"GB": GB, "GiB": GIB}
BYTES_PER_VALUE = [("fp32 (4 bytes)", 4), ("fp16 / bf16 (2 bytes)", 2), ("int8 / fp8 (1 byte)", 1)]
COLOURS = {"weights": "#4c72b0", "caches": "#dd8452", "left": "#d9d9d9"}


def calculate(n_layers: int, n_kv_heads: int, head_dim: int, n_tokens: int, bytes_per_value: int,
              gpu_bytes: int, weight_bytes: int) -> dict:
    """Everything the calculator shows, as exact integers (bytes, tokens, sequences)."""
    per_token = kv_cache_bytes(n_layers, n_kv_heads, head_dim, 1, bytes_per_value)
    per_sequence = kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value)
    spare = max(gpu_bytes - weight_bytes, 0)
    tokens = max_tokens(gpu_bytes, weight_bytes, n_layers, n_kv_heads, head_dim, bytes_per_value)
    batch = (max_batch(gpu_bytes, weight_bytes, n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value)
             if per_sequence else 0)
    return {
        "bytes_per_token": per_token,
        "bytes_per_sequence": per_sequence,
        "gpu_bytes": gpu_bytes,
        "weight_bytes": weight_bytes,
        "spare_bytes": spare,
        "max_tokens": tokens,
        "max_batch": batch,
        "batch_cache_bytes": batch * per_sequence,
        "left_bytes": spare - batch * per_sequence,
        "weights_fit": weight_bytes < gpu_bytes,
    }


def memory_segments(result: dict) -> list[tuple[str, int]]:
    """The GPU's memory as (label, bytes) pieces: weights, caches of the batch, left over.

    When the weights do not fit, one piece: the weights, longer than the memory.
    """
    if not result["weights_fit"]:
        return [("weights", result["weight_bytes"])]
    return [("weights", result["weight_bytes"]), ("caches", result["batch_cache_bytes"]),
            ("left", result["left_bytes"])]


def svg_bar(result: dict, width: int = 640, height: int = 70) -> str:
    """An inline SVG bar of the GPU's memory: weights, one block per cached sequence, left over."""
    total = max(result["gpu_bytes"], result["weight_bytes"], 1)
    scale = (width - 2) / total
    y, h = 6, 30
    # A viewBox with width 100% lets the bar shrink with a narrow page instead of being clipped.
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
             f'style="max-width:{width}px" role="img" aria-label="GPU memory: weights, caches, left over">']
    x = 1.0
    w = result["weight_bytes"] * scale
    parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h}" fill="{COLOURS["weights"]}"/>')
    x += w
    if result["weights_fit"]:
        seq_w = result["bytes_per_sequence"] * scale
        batch = result["max_batch"]
        if batch and seq_w >= 3:  # one outlined block per sequence while they are wide enough to see
            for _ in range(batch):
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{seq_w:.1f}" height="{h}" '
                             f'fill="{COLOURS["caches"]}" stroke="white" stroke-width="1"/>')
                x += seq_w
        elif batch:
            cw = result["batch_cache_bytes"] * scale
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{cw:.1f}" height="{h}" fill="{COLOURS["caches"]}"/>')
            x += cw
        lw = max(width - 1 - x, 0)
        parts.append(f'<rect x="{x:.1f}" y="{y}" width="{lw:.1f}" height="{h}" fill="{COLOURS["left"]}"/>')
    else:
        gx = result["gpu_bytes"] * scale
        parts.append(f'<line x1="{gx:.1f}" y1="2" x2="{gx:.1f}" y2="{y + h + 4}" stroke="black" '
                     f'stroke-width="2"/>')
    legend = [("weights", "weights"), ("caches", f"caches ({result['max_batch']} sequences)"),
              ("left", "left over")]
    lx = 1
    for key, text in legend:
        parts.append(f'<rect x="{lx}" y="{y + h + 12}" width="12" height="12" fill="{COLOURS[key]}"/>')
        parts.append(f'<text x="{lx + 16}" y="{y + h + 22}" font-size="12" font-family="sans-serif">'
                     f'{html.escape(text)}</text>')
        lx += 30 + 7 * len(text)
    if not result["weights_fit"]:
        parts.append(f'<line x1="{lx}" y1="{y + h + 10}" x2="{lx}" y2="{y + h + 25}" stroke="black" stroke-width="2"/>')
        parts.append(f'<text x="{lx + 6}" y="{y + h + 22}" font-size="12" font-family="sans-serif">'
                     f'end of the GPU\'s memory: the weights do not fit</text>')
    parts.append("</svg>")
    return "".join(parts)


def _summary_html(r: dict, n_tokens: int, unit: str) -> str:
    u = UNITS[unit]

    def both(n: int) -> str:
        return f"{n:,} bytes ({format_bytes(n)})"

    rows = [
        ("cache per token", both(r["bytes_per_token"])),
        (f"cache per sequence of {n_tokens:,} tokens", both(r["bytes_per_sequence"])),
        ("GPU memory", f"{r['gpu_bytes']:,} bytes ({r['gpu_bytes'] / u:,.2f} {unit})"),
        ("weights", f"{r['weight_bytes']:,} bytes ({r['weight_bytes'] / u:,.2f} {unit})"),
    ]
    if r["weights_fit"]:
        rows += [
            ("left for caches", f"{r['spare_bytes']:,} bytes ({r['spare_bytes'] / u:,.2f} {unit})"),
            ("tokens that fit", f"{r['max_tokens']:,}"),
            ("sequences that fit (batch)", f"<b>{r['max_batch']:,}</b>"),
        ]
    else:
        rows += [("sequences that fit (batch)", "<b>0</b>: the weights alone do not fit in this GPU")]
    body = "".join(f"<tr><td style='padding-right:1em'>{k}</td><td style='text-align:right'>{v}</td></tr>"
                   for k, v in rows)
    return f"<table class='kv-calculator'>{body}</table>"


class CacheCalculator:
    """The cache calculator widget.  Display it in a notebook; drive it by setting ``.value``.

    Inputs: ``model_preset``, ``layers``, ``kv_heads``, ``head_dim``, ``tokens``,
    ``bytes_per_value``, ``gpu_preset``, ``gpu_memory``, ``weights``, ``unit`` (of the two
    memory fields: "GB" = 10**9 bytes, "GiB" = 2**30 bytes).
    Outputs: ``result`` (a dict of exact integers, see ``calculate``), ``summary`` (an HTML
    widget with the table) and ``chart`` (an HTML widget with the SVG bar).
    """

    def __init__(self, model: str = "7B", gpu: str = "A10", n_tokens: int = 4096, bytes_per_value: int = 2):
        style = {"description_width": "120px"}
        # Two columns of 330 px fit the book's text column side by side and wrap under each
        # other on a narrow screen; a field wide enough for "fp16 / bf16 (2 bytes)".
        layout = W.Layout(width="320px")
        self.model_preset = W.Dropdown(options=[(m.name, k) for k, m in MODELS.items()] + [("custom", "custom")],
                                       value=model, description="model", style=style, layout=layout)
        self.layers = W.BoundedIntText(value=1, min=1, max=10_000, description="layers L", style=style,
                                       layout=layout)
        self.kv_heads = W.BoundedIntText(value=1, min=1, max=10_000, description="KV heads G", style=style,
                                         layout=layout)
        self.head_dim = W.BoundedIntText(value=1, min=1, max=100_000, description="head size d", style=style,
                                         layout=layout)
        self.tokens = W.BoundedIntText(value=n_tokens, min=1, max=100_000_000, description="tokens T",
                                       style=style, layout=layout)
        self.bytes_per_value = W.Dropdown(options=BYTES_PER_VALUE, value=bytes_per_value,
                                          description="bytes per value b", style=style, layout=layout)
        self.gpu_preset = W.Dropdown(options=[(g.name, k) for k, g in GPUS.items()] + [("custom", "custom")],
                                     value=gpu, description="GPU", style=style, layout=layout)
        self.unit = W.ToggleButtons(options=list(UNITS), value="GB", description="memory unit",
                                    style={**style, "button_width": "64px"})
        self.gpu_memory = W.BoundedFloatText(value=1.0, min=0.0, max=1e6, step=1.0, description="GPU memory",
                                             style=style, layout=layout)
        self.weights = W.BoundedFloatText(value=0.0, min=0.0, max=1e6, step=1.0, description="weights (fp16)",
                                          style=style, layout=layout)
        self.summary = W.HTML()
        self.chart = W.HTML()
        self.result: dict = {}
        self._applying = False

        self._apply_model(model)
        self._apply_gpu(gpu)
        self.model_preset.observe(lambda ch: self._apply_model(ch["new"]), names="value")
        self.gpu_preset.observe(lambda ch: self._apply_gpu(ch["new"]), names="value")
        self.unit.observe(self._unit_changed, names="value")
        for w in (self.layers, self.kv_heads, self.head_dim, self.weights):
            w.observe(self._model_field_changed, names="value")
        self.gpu_memory.observe(self._gpu_field_changed, names="value")
        for w in (self.tokens, self.bytes_per_value):
            w.observe(lambda ch: self.update(), names="value")

        column = W.Layout(width="330px", margin="0 6px 8px 0")
        model_box = W.VBox([W.HTML("<b>Model</b>"), self.model_preset, self.layers, self.kv_heads, self.head_dim,
                            self.weights], layout=column)
        run_box = W.VBox([W.HTML("<b>Cache and GPU</b>"), self.tokens, self.bytes_per_value, self.gpu_preset,
                          self.gpu_memory, self.unit], layout=column)
        self.widget = W.VBox([W.HBox([model_box, run_box], layout=W.Layout(flex_flow="row wrap")),
                              self.summary, self.chart])
        self.update()

    # -- presets --------------------------------------------------------------------------
    @contextmanager
    def _applying_values(self):
        """Set several fields at once: their observers neither recompute nor reset the presets
        until the block ends (the caller then calls ``update`` once)."""
        self._applying = True
        try:
            yield
        finally:
            self._applying = False

    def _apply_model(self, key: str) -> None:
        if key == "custom" or key not in MODELS:
            return
        m = MODELS[key]
        with self._applying_values():
            self.layers.value, self.kv_heads.value, self.head_dim.value = m.n_layers, m.n_kv_heads, m.head_dim
            self.weights.value = m.weight_bytes(2) / UNITS[self.unit.value]
        self.update()

    def _apply_gpu(self, key: str) -> None:
        if key == "custom" or key not in GPUS:
            return
        with self._applying_values():
            self.gpu_memory.value = GPUS[key].memory_bytes / UNITS[self.unit.value]
        self.update()

    def _unit_changed(self, change) -> None:
        """Keep the presets' byte counts when the unit changes; custom values keep their number."""
        with self._applying_values():
            if self.model_preset.value in MODELS:
                self.weights.value = MODELS[self.model_preset.value].weight_bytes(2) / UNITS[change["new"]]
            if self.gpu_preset.value in GPUS:
                self.gpu_memory.value = GPUS[self.gpu_preset.value].memory_bytes / UNITS[change["new"]]
        self.update()

    def _model_field_changed(self, change) -> None:
        if self._applying:
            return
        key = self.model_preset.value
        if key in MODELS:
            m = MODELS[key]
            same = ((self.layers.value, self.kv_heads.value, self.head_dim.value) ==
                    (m.n_layers, m.n_kv_heads, m.head_dim)
                    and self._bytes(self.weights.value) == m.weight_bytes(2))
            if not same:
                with self._applying_values():
                    self.model_preset.value = "custom"
        self.update()

    def _gpu_field_changed(self, change) -> None:
        if self._applying:
            return
        key = self.gpu_preset.value
        if key in GPUS and self._bytes(self.gpu_memory.value) != GPUS[key].memory_bytes:
            with self._applying_values():
                self.gpu_preset.value = "custom"
        self.update()

    # -- the arithmetic and the display ---------------------------------------------------------
    def _bytes(self, amount: float) -> int:
        return round(amount * UNITS[self.unit.value])

    def update(self) -> dict:
        """Recompute ``result`` from the inputs and redraw ``summary`` and ``chart``."""
        if self._applying:
            return self.result
        self.result = calculate(self.layers.value, self.kv_heads.value, self.head_dim.value, self.tokens.value,
                                self.bytes_per_value.value, self._bytes(self.gpu_memory.value),
                                self._bytes(self.weights.value))
        self.summary.value = _summary_html(self.result, self.tokens.value, self.unit.value)
        self.chart.value = svg_bar(self.result)
        return self.result

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def presets_figure(n_tokens: int = 4096, bytes_per_value: int = 2):
    """A matplotlib figure of the calculator's presets: every model on every GPU.

    Left: cache bytes per token of each model (fp16 and int8).  Right: each GPU's memory split
    into the model's fp16 weights, the caches of the batch of ``n_tokens``-token sequences that
    fits, and what is left; a model whose weights do not fit is drawn past the GPU's edge.
    """
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 2.2]})
    names = [m.name for m in MODELS.values()]
    for offset, (b, label) in zip((-0.2, 0.2), ((2, "fp16"), (1, "int8"))):
        vals = [m.bytes_per_token(b) / 2**10 for m in MODELS.values()]
        bars = ax1.barh([i + offset for i in range(len(names))], vals, height=0.4, label=label)
        ax1.bar_label(bars, labels=[f"{v:,.0f}" for v in vals], padding=2, fontsize=8)
    ax1.set_yticks(range(len(names)), names)
    ax1.invert_yaxis()
    ax1.set_xlabel("cache per token (KiB)")
    ax1.set_xlim(0, 700)
    ax1.legend(loc="lower right")
    ax1.set_title("Cache per token")

    rows = []
    for mk, m in MODELS.items():
        for gk, g in GPUS.items():
            r = calculate(m.n_layers, m.n_kv_heads, m.head_dim, n_tokens, bytes_per_value, g.memory_bytes,
                          m.weight_bytes(2))
            rows.append((f"{m.name} on {g.name}", r))
    for i, (label, r) in enumerate(rows):
        x = 0.0
        for key, size in memory_segments(r):
            ax2.barh(i, size / GB, left=x, color=COLOURS[key], edgecolor="white", height=0.7)
            x += size / GB
        ax2.plot([r["gpu_bytes"] / GB] * 2, [i - 0.42, i + 0.42], color="black", lw=1.5)
        if r["weights_fit"]:
            ax2.text(r["gpu_bytes"] / GB + 2, i, f"batch {r['max_batch']}", va="center", fontsize=8)
        else:
            ax2.text(r["gpu_bytes"] / GB + 2, i, f"weights ({r['weight_bytes'] / GB:,.0f} GB) do not fit",
                     va="center", fontsize=8, color="white")
    ax2.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax2.invert_yaxis()
    ax2.set_xlabel("GB (10^9 bytes); black tick = the GPU's memory")
    ax2.set_xlim(0, 150)
    ax2.set_title(f"Memory at {n_tokens:,} tokens per sequence, fp16 cache")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in ("weights", "caches", "left")]
    ax2.legend(handles, ["weights (fp16)", "caches of the batch", "left over"], loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig
