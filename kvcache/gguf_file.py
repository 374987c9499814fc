"""Read a Llama model from a GGUF file, the single-file format of llama.cpp.

A GGUF file holds key/value metadata and named tensors (read with the ``gguf`` package's
``GGUFReader``, which maps the file into memory)::

    general.architecture = "llama"                 the only architecture read here
    llama.block_count, llama.embedding_length ...  the sizes: ``read_config`` turns them into
                                                   transformers' config.json keys
    tokenizer.ggml.*, tokenizer.chat_template      the tokenizer (``kvcache.tokenizer``)
    token_embd.weight, blk.{i}.attn_q.weight ...   the tensors, each of one ggml type

A tensor of ggml shape (ne0, ne1) is stored row-major as ne1 rows of ne0 numbers, so its numpy
shape is (ne1, ne0): transformers' (out, in) orientation already.  Quantized types store blocks
of 32 numbers (Q8_0: a float16 scale and 32 int8; Q4_0: a scale and 32 4-bit codes; Q4_1: a
scale, a minimum and 32 4-bit codes); ``gguf.quants.dequantize`` turns every type read here
(``SUPPORTED_TYPES``) into float32.  A tensor stored in the model's own 2-byte dtype (F16 for a
float16 model, BF16 for a bfloat16 one) is copied bit for bit, never through float32.

Loading streams (``TensorFile``): a tensor is read a chunk of rows at a time (at most
``CHUNK_VALUES`` numbers), its bytes taken from the file with ``os.pread``, dequantized, and
written straight into the array the model keeps, in that array's layout and dtype::

    for each tensor, for rows lo .. hi (hi - lo <= CHUNK_VALUES / columns, whole heads for q/k):
        raw (hi - lo, bytes per row) uint8  = pread(file, offset + lo * bytes per row)
        values (hi - lo, columns) float32   = dequantize(raw)
        out[lo:hi] = values                   cast to the model's dtype in that assignment

So loading holds the model's arrays and one chunk's temporaries, never a dequantized copy of
the whole model, and the file's bytes pass through the page cache, not through this process's
memory (a memory map would keep every page it touched resident).  ``read_state_dict`` reads
every tensor the same way into arrays of its own, for a caller that wants transformers' dict.

llama.cpp's converter permutes the rows of the query and key projections: transformers rotates
the two halves of a head (dimension i with i + d/2), llama.cpp rotates neighbouring pairs
(2i with 2i + 1).  For each head, its rows were reordered ``(2, d/2) -> (d/2, 2)``; reading puts
them back, ``(d/2, 2) -> (2, d/2)``, so the tensors are exactly transformers' own.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .config import UnsupportedConfig
from .half import bfloat16

__all__ = ["GGUFError", "SUPPORTED_TYPES", "CHUNK_VALUES", "TensorFile", "is_gguf", "open_gguf", "metadata",
           "read_config", "read_state_dict", "read_model", "unpermute_rotary_rows"]

MAGIC = b"GGUF"
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")
# Numbers dequantized at a time (256 KiB as float32): bounds what loading holds beside the model
# (gguf's dequantizer makes a few temporaries of a chunk's size).
CHUNK_VALUES = 64 * 1024

# llama.cpp's names of one layer's tensors -> transformers' names under model.layers.{i}.
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
MODEL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

# llama.* metadata keys -> config.json keys.  Every other llama.* key is refused by name (below):
# the namespace is where llama.cpp puts settings that change the forward pass.
SIZES = {
    "block_count": "num_hidden_layers",
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
}
# Keys checked against the sizes rather than copied (rope.dimension_count: how much of each
# head rotates; key_length / value_length: the head size, when it is not D / H).
CHECKED = ("rope.dimension_count", "attention.key_length", "attention.value_length")
# Keys that say "no change" at one value: accepted at that value, refused at any other.
NEUTRAL = {"rope.scaling.type": ("none",), "rope.scaling.factor": (1.0,),
           "expert_count": (0,), "expert_used_count": (0,)}


class GGUFError(ValueError):
    """The file is not a GGUF Llama model this engine reads (what is wrong is in the message)."""


def is_gguf(path) -> bool:
    """True when ``path`` is a file that starts with GGUF's magic bytes."""
    path = Path(path)
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == MAGIC


def open_gguf(path):
    """A ``gguf.GGUFReader`` on ``path``, or a GGUFError naming the file and what is wrong."""
    import gguf

    path = Path(path)
    if not path.is_file():
        raise GGUFError(f"{path} is not a file")
    if not is_gguf(path):
        raise GGUFError(f"{path} is not a GGUF file (it does not start with {MAGIC!r})")
    try:
        return gguf.GGUFReader(str(path))
    except Exception as err:           # noqa: BLE001 - the reader reports a damaged file its own ways
        raise GGUFError(f"cannot read {path}: {type(err).__name__}: {err}") from None


def _reader(source):
    return open_gguf(source) if isinstance(source, (str, Path)) else source


def metadata(source) -> dict:
    """Every metadata key of the file and its value (strings, numbers, lists of them)."""
    reader = _reader(source)
    return {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}


def _sizes(settings: dict) -> dict:
    """The config.json sizes of the ``llama.*`` settings (``SIZES``); a setting that would change
    the model (not neutral, not checked elsewhere) is refused, and a size the model needs must be
    there."""
    prefix, sizes, refused = "llama.", {}, []
    for key, value in settings.items():
        if key in SIZES:
            sizes[SIZES[key]] = value
        elif key in NEUTRAL:
            if value not in NEUTRAL[key]:
                refused.append(f"{prefix}{key}={value!r}")
        elif key not in CHECKED:
            refused.append(f"{prefix}{key}={value!r}")
    if refused:
        raise UnsupportedConfig(f"GGUF setting(s) {', '.join(refused)} not supported by this engine: "
                                "refused rather than ignored, since they change the model")
    missing = [prefix + k for k, name in SIZES.items()
               if name not in sizes and k not in ("vocab_size", "rope.freq_base", "attention.head_count_kv")]
    if missing:
        raise GGUFError(f"GGUF file lacks {', '.join(missing)}")
    return sizes


def _key_length(settings: dict, config: dict):
    """The head width the file states (``attention.key_length``), or None; keys and values must
    have the same width, and the rotary embedding must turn all of each head."""
    key_length = settings.get("attention.key_length")
    value_length = settings.get("attention.value_length", key_length)
    if key_length != value_length:
        raise UnsupportedConfig(f"llama.attention.key_length={key_length} differs from "
                                f"llama.attention.value_length={value_length}: not supported")
    head_dim = key_length if key_length is not None else config["hidden_size"] // config["num_attention_heads"]
    rotary = settings.get("rope.dimension_count", head_dim)
    if rotary != head_dim:
        raise UnsupportedConfig(f"llama.rope.dimension_count={rotary} rotates part of each head of "
                                f"{head_dim}: not supported (all of each head rotates)")
    return key_length


def read_config(source) -> dict:
    """The model's config as transformers' config.json keys, from the file's ``llama.*`` metadata.

    Refused by name: an architecture other than llama, a partial rotary dimension, rotary
    scaling, mixtures of experts, and any other ``llama.*`` key.  The EOS and BOS ids come from
    ``tokenizer.ggml.*``; the embeddings are tied when the file has no ``output.weight``.
    """
    reader = _reader(source)
    meta = metadata(reader)
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise UnsupportedConfig(f"GGUF architecture {arch!r} is not supported: this engine reads "
                                "general.architecture 'llama' only")
    settings = {k[len("llama."):]: v for k, v in meta.items() if k.startswith("llama.")}
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **_sizes(settings)}
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in meta:
        config["vocab_size"] = len(meta["tokenizer.ggml.tokens"])
    key_length = _key_length(settings, config)
    if key_length is not None:
        config["head_dim"] = key_length
    names = {t.name for t in reader.tensors}
    config["tie_word_embeddings"] = "output.weight" not in names
    for key in ("eos_token_id", "bos_token_id"):
        if f"tokenizer.ggml.{key}" in meta:
            config[key] = int(meta[f"tokenizer.ggml.{key}"])
    return {k: (int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v)
            for k, v in config.items()}


def unpermute_rotary_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's row order of a query or key projection (heads * d, D).

    Per head, llama.cpp stores row 2i + j at j d/2 + i of transformers' order (j = 0, 1)."""
    rows, cols = w.shape
    d = rows // heads
    return w.reshape(heads, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _transformers_name(name: str) -> str | None:
    """transformers' name of a llama.cpp tensor, or None for a tensor this engine has no place for."""
    if name in MODEL_TENSORS:
        return MODEL_TENSORS[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in LAYER_TENSORS:
        return f"model.layers.{int(parts[1])}.{LAYER_TENSORS[parts[2]]}"
    return None


class TensorFile:
    """The tensors of a GGUF Llama file under transformers' names, each read when asked for.

    Built from an open reader (its tensor list: names, types, shapes and offsets, kept as plain
    numbers, so the reader may be dropped, and its config, ``read_config`` unless given), after
    refusing, by name and before anything is read, a tensor of a type outside
    ``SUPPORTED_TYPES`` and a tensor with no place in a Llama model (``rope_freqs.weight``, the
    Llama-3 rotary scaling, among them).  The config's head counts say how the query and key
    rows are put back in transformers' order.
    """

    def __init__(self, reader, config: dict | None = None):
        config = read_config(reader) if config is None else config
        self.config = config
        bad_types = [f"{t.name} ({t.tensor_type.name})" for t in reader.tensors
                     if t.tensor_type.name not in SUPPORTED_TYPES]
        if bad_types:
            raise GGUFError(f"GGUF tensor type(s) not supported: {', '.join(bad_types[:5])}"
                            f"{' ...' if len(bad_types) > 5 else ''} (this engine reads {', '.join(SUPPORTED_TYPES)})")
        unknown = [t.name for t in reader.tensors if _transformers_name(t.name) is None]
        if unknown:
            raise GGUFError(f"GGUF tensor(s) {', '.join(unknown[:5])} have no place in a Llama model: not supported")
        heads = {"self_attn.q_proj.weight": config["num_attention_heads"],
                 "self_attn.k_proj.weight": config.get("num_key_value_heads", config["num_attention_heads"])}
        self.path = Path(reader.data.filename)
        self._entries = {}                 # name -> (ggml type name, numpy shape, offset, bytes, heads)
        for t in reader.tensors:
            name = _transformers_name(t.name)
            permuted = [n for suffix, n in heads.items() if name.endswith(suffix)]
            shape = tuple(int(n) for n in reversed(t.shape.tolist()))
            self._entries[name] = (t.tensor_type, shape, int(t.data_offset), int(t.n_bytes),
                                   permuted[0] if permuted else None)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's name and numpy shape (transformers' (out, in) for a matrix)."""
        return {name: entry[1] for name, entry in self._entries.items()}

    def read(self, name: str, dtype=np.float32) -> np.ndarray:
        """Tensor ``name`` as a new C-contiguous array of ``dtype``."""
        out = np.empty(self._entries[name][1], np.dtype(dtype))
        self.read_into(name, out)
        return out

    def read_into(self, name: str, out: np.ndarray) -> None:
        """Write tensor ``name`` into ``out`` (an array or view of its shape, any layout and dtype),
        a chunk of rows at a time: bits copied when the file stores ``out``'s own 2-byte dtype,
        otherwise dequantized to float32 and cast by the assignment."""
        qtype, shape, offset, nbytes, heads = self._entries[name]
        if out.shape != shape:
            raise ValueError(f"{name} has shape {shape}, not the {out.shape} it is read into")
        rows, cols = (1, shape[0]) if len(shape) == 1 else shape
        target = out.reshape(rows, cols)         # a view: 1-D out is contiguous, 2-D out is (rows, cols)
        own = {"F16": np.dtype(np.float16), "BF16": bfloat16}.get(qtype.name)
        exact = own is not None and own == out.dtype
        row_bytes = nbytes // rows
        head_rows = rows // heads if heads else 1          # q/k chunks hold whole heads
        step = max(head_rows, CHUNK_VALUES // cols // head_rows * head_rows)
        with open(self.path, "rb") as f:
            for lo in range(0, rows, step):
                hi = min(rows, lo + step)
                raw = os.pread(f.fileno(), (hi - lo) * row_bytes, offset + lo * row_bytes)
                if len(raw) != (hi - lo) * row_bytes:
                    raise GGUFError(f"{self.path} ends inside tensor {name}: the file is cut short")
                values = self._values(np.frombuffer(raw, np.uint8).reshape(hi - lo, row_bytes), qtype,
                                      own if exact else None)
                if heads:
                    values = unpermute_rotary_rows(values, (hi - lo) // head_rows)
                target[lo:hi] = values

    @staticmethod
    def _values(raw: np.ndarray, qtype, own) -> np.ndarray:
        """raw (rows, bytes per row) -> (rows, columns): the 2-byte values themselves when ``own``
        is their dtype, else float32."""
        import gguf

        if own is not None:
            return raw.view(np.uint16).view(own)
        return np.asarray(gguf.quants.dequantize(raw, qtype), np.float32).reshape(len(raw), -1)


def read_state_dict(source, config: dict | None = None, dtype=np.float32) -> dict[str, np.ndarray]:
    """Every tensor of the file under transformers' names, dequantized, as ``dtype`` (refused as
    ``TensorFile`` refuses).  Loading a model does not build this dict (``Model.from_gguf``)."""
    reader = _reader(source)
    config = read_config(reader) if config is None else config
    tensors = TensorFile(reader, config)
    return {name: tensors.read(name, dtype) for name in tensors.shapes()}


def read_model(source, dtype=np.float32) -> tuple[dict, dict[str, np.ndarray]]:
    """(config.json keys, transformers' state dict) of a GGUF file (a path, or a reader on it)."""
    reader = _reader(source)
    config = read_config(reader)
    return config, read_state_dict(reader, config, dtype)
