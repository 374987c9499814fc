"""The cache calculator of Chapter 3: a widget that works on the site and in JupyterLab.

``CacheCalculator()`` shows a form (a model preset, layers, KV heads, head size, the weights'
size; tokens per sequence, bytes per value, a GPU preset and its memory, the unit of the two
memory fields) and, below it, the cache per token, the cache per sequence, how many tokens and
whole sequences fit beside the weights, and a bar of the GPU's memory split into weights, one
block per sequence's cache, and what is left.

It is a course widget (``coursebook.widgets``): its drawing and its arithmetic run in the
browser, in ``calculator.js`` beside this file, so every field recomputes on the static site
with no kernel; the browser counts bytes with exact integers (BigInt) and checks what the
reader types.  In JupyterLab the same module draws it, and the Python side follows: each field
is a trait a notebook sets and reads, and ``result`` is recomputed in Python, from
``lessons.memory``, on every change (from the notebook or from the reader)::

    calc = CacheCalculator()
    calc.layers = 80                  # the model preset becomes "custom"
    calc.result["max_batch"]          # what the widget shows, from lessons.memory
    calc.summary()                    # its table, as (label, text) rows

``calculate`` is the same arithmetic without the widget, and ``presets_figure`` draws the
presets with matplotlib.
"""
from __future__ import annotations

from contextlib import contextmanager

import traitlets

from .base import CourseWidget

from lessons.memory import GB, GIB, MODELS, format_bytes, kv_cache_bytes, max_batch, max_tokens
from lessons.roofline import GPUS

__all__ = ["UNITS", "BYTES_PER_VALUE", "FIELDS", "AMOUNTS", "calculate", "memory_segments", "to_bytes",
           "preset_amount", "summary_rows", "CacheCalculator", "presets_figure"]

UNITS = {"GB": GB, "GiB": GIB}
BYTES_PER_VALUE = [("fp32 (4 bytes)", 4), ("fp16 / bf16 (2 bytes)", 2), ("int8 / fp8 (1 byte)", 1)]
COLOURS = {"weights": "#4c72b0", "caches": "#dd8452", "left": "#d9d9d9"}
#: The whole-number fields: trait -> (label, smallest, largest).  The page refuses anything else
#: with a message, and so does the Python side (a TraitError).
FIELDS = {
    "layers": ("layers L", 1, 10_000),
    "kv_heads": ("KV heads G", 1, 10_000),
    "head_dim": ("head size d", 1, 100_000),
    "tokens": ("tokens T", 1, 100_000_000),
}
#: The two memory fields, in the chosen unit: trait -> (label, smallest, largest).
AMOUNTS = {
    "weights": ("weights (fp16)", 0, 1_000_000),
    "gpu_memory": ("GPU memory", 0, 1_000_000),
}
CUSTOM = "custom"


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


def to_bytes(amount: float, unit: str) -> int:
    """Bytes of a memory field: ``amount`` units of ``unit`` ("GB" or "GiB"), to the nearest
    byte (Python's round: ties to even; the page rounds the same way)."""
    return round(amount * UNITS[unit])


def preset_amount(n_bytes: int, unit: str) -> float:
    """What a memory field shows for a preset of ``n_bytes``: the amount in ``unit`` to two
    decimals (an A10's 24,000,000,000 bytes are 24 GB, or 22.35 GiB).  While the preset is
    chosen the calculator counts its exact bytes; the page rounds the same way."""
    return round(n_bytes / UNITS[unit], 2)


def summary_rows(result: dict, n_tokens: int, unit: str) -> list[tuple[str, str]]:
    """The calculator's table as (label, text) rows: the words the widget shows."""
    u = UNITS[unit]

    def both(n: int) -> str:
        return f"{n:,} bytes ({format_bytes(n)})"

    def amount(n: int) -> str:
        return f"{n:,} bytes ({n / u:,.2f} {unit})"

    rows = [
        ("cache per token", both(result["bytes_per_token"])),
        (f"cache per sequence of {n_tokens:,} tokens", both(result["bytes_per_sequence"])),
        ("GPU memory", amount(result["gpu_bytes"])),
        ("weights", amount(result["weight_bytes"])),
    ]
    if result["weights_fit"]:
        rows += [
            ("left for caches", amount(result["spare_bytes"])),
            ("tokens that fit", f"{result['max_tokens']:,}"),
            ("sequences that fit (batch)", f"{result['max_batch']:,}"),
        ]
    else:
        rows += [("sequences that fit (batch)", "0: the weights alone do not fit in this GPU")]
    return rows


def _config() -> dict:
    """What the browser needs besides the fields: presets, units, bounds, colours."""
    return {
        "models": {k: {"name": m.name, "layers": m.n_layers, "kv_heads": m.n_kv_heads, "head_dim": m.head_dim,
                       "weight_bytes": m.weight_bytes(2)} for k, m in MODELS.items()},
        "gpus": {k: {"name": g.name, "memory_bytes": g.memory_bytes} for k, g in GPUS.items()},
        "units": dict(UNITS),
        "bytes_per_value": [list(option) for option in BYTES_PER_VALUE],
        "fields": {k: {"label": label, "min": lo, "max": hi} for k, (label, lo, hi) in FIELDS.items()},
        "amounts": {k: {"label": label, "min": lo, "max": hi} for k, (label, lo, hi) in AMOUNTS.items()},
        "colours": dict(COLOURS),
    }


class CacheCalculator(CourseWidget):
    """The cache calculator widget.  Display it in a notebook; drive it by setting its traits.

    Inputs (traits): ``model_preset`` (a key of ``lessons.memory.MODELS`` or "custom"),
    ``layers``, ``kv_heads``, ``head_dim``, ``tokens``, ``bytes_per_value`` (4, 2 or 1),
    ``gpu_preset`` (a key of ``lessons.roofline.GPUS`` or "custom"), ``gpu_memory`` and
    ``weights`` (amounts in ``unit``: "GB" = 10**9 bytes, "GiB" = 2**30 bytes).
    Choosing a preset fills its fields (its amount in ``unit`` to two decimals, see
    ``preset_amount``; while the preset is chosen the result counts its exact bytes); editing a
    field makes its preset "custom".  Changing the unit changes how the two memory fields are
    read: their numbers stay, the bytes change, and a preset they no longer match becomes
    "custom" (24 GB is an A10; 24 GiB is not).  Output: ``result`` (a dict of exact integers,
    see ``calculate``) and ``summary()`` (the rows of the widget's table).
    """

    _module = "calculator.js"
    _repr_traits = ("model_preset", "layers", "kv_heads", "head_dim", "tokens", "bytes_per_value",
                    "gpu_preset", "gpu_memory", "weights", "unit")

    model_preset = traitlets.Unicode("7B").tag(sync=True)
    layers = traitlets.Int(32).tag(sync=True)
    kv_heads = traitlets.Int(32).tag(sync=True)
    head_dim = traitlets.Int(128).tag(sync=True)
    weights = traitlets.Float(14.0).tag(sync=True)
    tokens = traitlets.Int(4096).tag(sync=True)
    bytes_per_value = traitlets.Int(2).tag(sync=True)
    gpu_preset = traitlets.Unicode("A10").tag(sync=True)
    gpu_memory = traitlets.Float(24.0).tag(sync=True)
    unit = traitlets.Unicode("GB").tag(sync=True)
    config = traitlets.Dict(read_only=True).tag(sync=True)

    def __init__(self, model: str = "7B", gpu: str = "A10", n_tokens: int = 4096, bytes_per_value: int = 2,
                 **kwargs):
        self._applying = True
        self.result: dict = {}
        super().__init__(model_preset=model, gpu_preset=gpu, tokens=n_tokens, bytes_per_value=bytes_per_value,
                         **kwargs)
        self._applying = False
        with self._applying_values():
            self._apply_model(self.model_preset)
            self._apply_gpu(self.gpu_preset)
        self.observe(self._update, names=["layers", "kv_heads", "head_dim", "weights", "tokens", "bytes_per_value",
                                          "gpu_memory", "unit"])
        self._update()

    @traitlets.default("config")
    def _default_config(self) -> dict:
        return _config()

    # -- what may be typed --------------------------------------------------------------------
    @traitlets.validate("layers", "kv_heads", "head_dim", "tokens")
    def _check_whole(self, proposal):
        name, value = proposal["trait"].name, proposal["value"]
        label, lo, hi = FIELDS[name]
        if not lo <= value <= hi:
            raise traitlets.TraitError(f"{label} must be a whole number from {lo:,} to {hi:,}, not {value!r}")
        return value

    @traitlets.validate("weights", "gpu_memory")
    def _check_amount(self, proposal):
        name, value = proposal["trait"].name, proposal["value"]
        label, lo, hi = AMOUNTS[name]
        if not lo <= value <= hi:    # False for NaN too
            raise traitlets.TraitError(f"{label} must be an amount from {lo:,} to {hi:,}, not {value!r}")
        return value

    @traitlets.validate("bytes_per_value")
    def _check_bytes_per_value(self, proposal):
        allowed = [b for _, b in BYTES_PER_VALUE]
        if proposal["value"] not in allowed:
            raise traitlets.TraitError(f"bytes per value must be one of {allowed}, not {proposal['value']!r}")
        return proposal["value"]

    @traitlets.validate("model_preset", "gpu_preset", "unit")
    def _check_choice(self, proposal):
        name, value = proposal["trait"].name, proposal["value"]
        allowed = {"model_preset": [*MODELS, CUSTOM], "gpu_preset": [*GPUS, CUSTOM], "unit": list(UNITS)}[name]
        if value not in allowed:
            raise traitlets.TraitError(f"{name} must be one of {allowed}, not {value!r}")
        return value

    # -- presets (calculator.js does the same for the reader's clicks) -------------------------
    @contextmanager
    def _applying_values(self):
        """Set several fields at once: their observers neither recompute nor reset the presets
        until the block ends, and the browser receives one message."""
        outer = self._applying
        self._applying = True
        try:
            with self.hold_sync():
                yield
        finally:
            self._applying = outer

    def _apply_model(self, key: str) -> None:
        if key not in MODELS:
            return
        m = MODELS[key]
        with self._applying_values():
            self.layers, self.kv_heads, self.head_dim = m.n_layers, m.n_kv_heads, m.head_dim
            self.weights = preset_amount(m.weight_bytes(2), self.unit)

    def _apply_gpu(self, key: str) -> None:
        if key not in GPUS:
            return
        with self._applying_values():
            self.gpu_memory = preset_amount(GPUS[key].memory_bytes, self.unit)

    @traitlets.observe("model_preset")
    def _model_preset_changed(self, change) -> None:
        if not self._applying:
            self._apply_model(change["new"])
            self._update()

    @traitlets.observe("gpu_preset")
    def _gpu_preset_changed(self, change) -> None:
        if not self._applying:
            self._apply_gpu(change["new"])
            self._update()

    def _matches_model(self) -> bool:
        """Do the model's fields still show its preset (in the current unit)?"""
        m = MODELS.get(self.model_preset)
        return m is not None and (self.layers, self.kv_heads, self.head_dim) == (m.n_layers, m.n_kv_heads, m.head_dim) \
            and self.weights == preset_amount(m.weight_bytes(2), self.unit)

    def _matches_gpu(self) -> bool:
        g = GPUS.get(self.gpu_preset)
        return g is not None and self.gpu_memory == preset_amount(g.memory_bytes, self.unit)

    @traitlets.observe("unit")
    def _unit_changed(self, change) -> None:
        """The memory fields keep their numbers, read in the new unit; a preset they no longer
        show becomes custom."""
        if self._applying:
            return
        self._model_field_changed()
        self._gpu_field_changed()
        self._update()

    @traitlets.observe("layers", "kv_heads", "head_dim", "weights")
    def _model_field_changed(self, change=None) -> None:
        if self._applying or self.model_preset not in MODELS:
            return
        if not self._matches_model():
            with self._applying_values():
                self.model_preset = CUSTOM

    @traitlets.observe("gpu_memory")
    def _gpu_field_changed(self, change=None) -> None:
        if self._applying or self.gpu_preset not in GPUS:
            return
        if not self._matches_gpu():
            with self._applying_values():
                self.gpu_preset = CUSTOM

    # -- the arithmetic ------------------------------------------------------------------------
    def gpu_bytes(self) -> int:
        """The GPU's memory in bytes: its preset's, while one is chosen, else the field's amount."""
        g = GPUS.get(self.gpu_preset)
        return g.memory_bytes if g is not None else to_bytes(self.gpu_memory, self.unit)

    def weight_bytes(self) -> int:
        """The weights in bytes: the model preset's (fp16), while one is chosen, else the field's."""
        m = MODELS.get(self.model_preset)
        return m.weight_bytes(2) if m is not None else to_bytes(self.weights, self.unit)

    def _update(self, change=None) -> dict:
        """Recompute ``result`` from the inputs (the browser draws it from the same inputs)."""
        if self._applying:
            return self.result
        self.result = calculate(self.layers, self.kv_heads, self.head_dim, self.tokens, self.bytes_per_value,
                                self.gpu_bytes(), self.weight_bytes())
        return self.result

    def summary(self) -> list[tuple[str, str]]:
        """The widget's table as (label, text) rows."""
        return summary_rows(self.result, self.tokens, self.unit)


def presets_figure(n_tokens: int = 4096, bytes_per_value: int = 2):
    """A matplotlib figure of the calculator's presets: every model on every GPU.

    One panel per model, one bar per GPU: the GPU's memory split into the model's fp16 weights,
    the caches of the batch of ``n_tokens``-token sequences that fits (one block per sequence
    while a block is wide enough to see), and what is left, with the batch written beside it.  A
    model whose weights do not fit is drawn past a black tick at the GPU's memory.  Drawn to the
    width of the text column (6.9 inches), its labels at 9 points or more.
    """
    import matplotlib.pyplot as plt

    top = 150        # GB: the 70B-class model's 140 GB of weights, and room for the labels
    fig, axes = plt.subplots(len(MODELS), 1, figsize=(6.9, 4.9), sharex=True, layout="constrained")
    for ax, m in zip(axes, MODELS.values()):
        per_sequence = m.cache_bytes(n_tokens, bytes_per_value)
        for i, g in enumerate(GPUS.values()):
            r = calculate(m.n_layers, m.n_kv_heads, m.head_dim, n_tokens, bytes_per_value, g.memory_bytes,
                          m.weight_bytes(2))
            pieces = memory_segments(r)
            if r["max_batch"] and per_sequence / GB >= top / 100:      # blocks of 1.5 GB or more
                pieces = [pieces[0], *[("caches", per_sequence)] * r["max_batch"], pieces[2]]
            x = 0.0
            for key, size in (piece for piece in pieces if piece[1]):
                ax.barh(i, size / GB, left=x, height=0.7, color=COLOURS[key], edgecolor="white", linewidth=0.8)
                x += size / GB
            gpu_gb = g.memory_bytes / GB
            ax.plot([gpu_gb] * 2, [i - 0.45, i + 0.45], color="black", lw=1.5)
            if r["weights_fit"]:
                ax.text(gpu_gb + 1.5, i, f"batch {r['max_batch']}", va="center", fontsize=9)
            else:
                ax.text(gpu_gb + 1.5, i, "weights do not fit", va="center", fontsize=9, color="white")
        ax.set_yticks(range(len(GPUS)), [f"{key} ({g.memory_bytes / GB:,.0f} GB)" for key, g in GPUS.items()])
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
        ax.set_title(f"{m.name}: {m.weight_bytes(2) / GB:,.0f} GB of weights, "
                     f"{format_bytes(per_sequence)} of cache per sequence", loc="left", fontsize=10)
    axes[-1].set_xlim(0, top)
    axes[-1].set_xlabel("GB ($10^9$ bytes); black tick: the GPU's memory")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in ("weights", "caches", "left")]
    cache = {4: "fp32", 2: "fp16", 1: "int8"}[bytes_per_value]
    fig.legend(handles, ["weights (fp16)", f"{cache} caches of {n_tokens:,}-token sequences", "left over"],
               loc="outside upper center", ncols=3)
    return fig
