"""A Llama-architecture decoder in numpy: the model people serve, small enough to read.

Shapes (letters of ``kvcache.config``; N tokens at once, B sequences)::

    token ids (N,) -> x = embed[ids]                                    (N, D)
    L times:
        h = rms_norm(x)
        q, k, v = h Wq^T, h Wk^T, h Wv^T                                (N, H, d), (N, G, d), (N, G, d)
        q, k = rope(q, positions), rope(k, positions)
        o = attention(q, k, v)      grouped: H / G query heads per kv head   (N, H, d)
        x = x + o Wo^T
        x = x + W_down (silu(W_gate rms_norm(x)) * W_up rms_norm(x))    SwiGLU
    logits = rms_norm(x) W_out^T                                        (N, V)

Two ways to run it:

* ``logits(token_ids)``: one whole sequence, causal attention over its own keys, no cache.  The
  reference: every cached path is tested against it.
* ``forward(tokens, counts, cache)``: counts[b] new tokens for each sequence b of a ``KVCache``,
  at positions lengths[b] .. lengths[b] + counts[b] - 1.  Each layer hands its keys and values
  to its cache (``update``) and asks it for the attention (``attend``); the model never sees how
  the cache lays them out.  ``prefill`` (whole prompts) and ``decode`` (one token each) are the
  two uses.

Weights keep transformers' orientation, (out, in), and products are x W^T (``kvcache.linear``).
The query, key and value projections are stacked into one (H d + 2 G d, D) matrix and gate/up
into one (2F, D): one matrix product each instead of three and two.  Every matrix, the embedding
table (the output layer when tied) included, is stored transposed: the (out, in) view of an
(in, out) buffer, the layout in which x W^T streams W fastest (``kvcache.linear``).  (The down
projection, whose rows are the longer runs, streams about 7% faster by rows at one token, but
two to sixteen rows of x, beam search's and a small batch's, multiply it 10-60% slower so.)

Loading allocates each of the model's arrays in its final layout and dtype and has the source
write every tensor into its place (``_assembled``): a GGUF file streams its tensors a chunk at a
time straight into them (``from_gguf``, through ``kvcache.gguf_file.TensorFile``), so the load
holds the model and one chunk, never a second copy of the weights; a state dict's tensors are
copied in, each cast in that copy, and a loader's own dict is emptied as the model fills
(``from_hf(..., consume=True)``), so the two never both hold every weight.  The residual stream
x is the model's own array, updated in place by each layer.

Dtypes (``MODEL_DTYPES``): float64 for exact comparisons, float32 for speed, and float16 or
bfloat16 (``kvcache.half``), whose weight matrices and embeddings are stored at 2 bytes a value
and computed as transformers computes a model loaded with ``torch_dtype=bfloat16`` on CPU, with
these differences:

* every product (q/k/v, o, gate/up, down, the output layer) accumulates in float32 and its result
  is rounded to the 2-byte dtype, as transformers' is (``kvcache.half.half_linear``);
* RMSNorm and softmax compute in float32 (transformers too); the norm gains are kept as float32
  copies of their 2-byte values (exact), and the norm's output is not rounded again;
* the residual stream, the rotated queries and keys and silu(gate) * up stay float32 between
  the products, where transformers rounds each to 2 bytes: the engine rounds less often;
* the cache stores keys and values in its own format (default: the model's dtype), rounded when
  written; attention reads them widened to float32.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import validate
from .cache import KVCache, LayerCache
from .checkpoint import read_config, read_state_dict
from .config import ModelConfig
from .gqa import causal_attention
from .gguf_file import TensorFile, is_gguf, open_gguf
from .half import HALF_DTYPES, is_half, round_to
from .layouts import new_cache
from .linear import linear
from .norm import rms_norm, swiglu
from .plan import StepPlan
from .rope import apply_rope, full_width, rope_cos_sin

__all__ = ["Model", "LayerWeights", "StateDictError", "hf_parameter_shapes", "random_state_dict",
           "MODEL_DTYPES"]

MODEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), *HALF_DTYPES.values())
# Up to this many tokens a step rotates its queries and keys with full-width tables (kvcache.rope:
# four operations instead of six; measured faster up to 64 tokens, slower from 128).
ROPE_FULL_WIDTH = 64


class StateDictError(ValueError):
    """Tensors missing, unexpected or of the wrong shape (each named in the message)."""


def hf_parameter_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of transformers' LlamaForCausalLM and their shapes, in order."""
    D, F, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, D)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (cfg.num_attention_heads * d, D),
            p + "self_attn.k_proj.weight": (cfg.num_key_value_heads * d, D),
            p + "self_attn.v_proj.weight": (cfg.num_key_value_heads * d, D),
            p + "self_attn.o_proj.weight": (D, cfg.num_attention_heads * d),
            p + "mlp.gate_proj.weight": (F, D),
            p + "mlp.up_proj.weight": (F, D),
            p + "mlp.down_proj.weight": (D, F),
            p + "input_layernorm.weight": (D,),
            p + "post_attention_layernorm.weight": (D,),
        })
    shapes["model.norm.weight"] = (D,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, D)
    return shapes


def random_state_dict(config, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights under transformers' names (float32 values, fixed seed).

    Projections are N(0, 1 / fan_in) (unit-variance outputs), the residual branches' output
    projections a further 1 / sqrt(2 L) smaller so the residual stream does not blow up with
    depth, norm gains 1, embeddings N(0, 1), and the output layer scaled so that logits have a
    spread of about 3: an untrained model, but one whose next-token choice is not a near-tie.
    """
    cfg = ModelConfig.from_dict(config)
    rng = np.random.default_rng(seed)
    D, L = cfg.hidden_size, cfg.num_hidden_layers

    def normal(shape, std):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    state = {}
    for name, shape in hf_parameter_shapes(cfg).items():
        if name.endswith("norm.weight"):
            state[name] = np.ones(shape, np.float32)
        elif name == "model.embed_tokens.weight":
            state[name] = normal(shape, 3.0 / np.sqrt(D) if cfg.tie_word_embeddings else 1.0)
        elif name == "lm_head.weight":
            state[name] = normal(shape, 3.0 / np.sqrt(D))
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            state[name] = normal(shape, 1.0 / np.sqrt(2 * L) / np.sqrt(shape[1]))
        else:
            state[name] = normal(shape, 1.0 / np.sqrt(shape[1]))
    return state


def _to_numpy(value):
    """A numpy array from an array, a list, or a tensor of a framework that has ``.detach()``.

    A torch tensor is read in its own dtype where numpy has it (float32, float16, float64: no
    copy on the CPU), bfloat16 widened to float32 (exact); the model casts once, to its dtype."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    return np.asarray(value)


def _dtype(dtype) -> np.dtype:
    """The model dtype called ``dtype`` (a name or a numpy dtype), or a ValueError naming it."""
    try:
        dt = None if dtype is None else np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in MODEL_DTYPES:        # (np.dtype(None) is float64: test None first)
        raise ValueError(f"model dtype must be float32, float64, float16 or bfloat16, got {dtype!r}")
    return dt


def _stored(name: str, arr: np.ndarray, dt: np.dtype) -> np.ndarray:
    """One checked tensor as the model keeps it: at ``dt``, except that a 2-byte model keeps its
    norm gains (D,) as float32 holding the 2-byte values.  An array already at ``dt`` is kept
    as it is (no copy: a bfloat16 checkpoint loaded in bfloat16 keeps its bits)."""
    if is_half(dt) and name.endswith("norm.weight"):
        return round_to(np.asarray(arr, np.float32), dt)
    return arr.astype(dt, copy=False)


@dataclass
class LayerWeights:
    """One decoder layer's weights, stacked for fewer products."""

    attn_norm: np.ndarray     # (D,)
    wqkv: np.ndarray          # (H d + 2 G d, D): q_proj, k_proj, v_proj rows
    wo: np.ndarray            # (D, H d)
    mlp_norm: np.ndarray      # (D,)
    w_gate_up: np.ndarray     # (2F, D): gate_proj, up_proj rows
    w_down: np.ndarray        # (D, F)


def _checked_arrays(state_dict, cfg: ModelConfig, dt: np.dtype) -> dict[str, np.ndarray]:
    """The tensors of ``state_dict`` as arrays (as given: cast later, once, as they are copied
    into the model), or a StateDictError listing every problem at once (missing, unexpected,
    wrong shape, not numbers, not finite, an untied head beside tied embeddings)."""
    expected = hf_parameter_shapes(cfg)
    given = {name: state_dict[name] for name in state_dict.keys()}
    tied_head = given.pop("lm_head.weight", None) if cfg.tie_word_embeddings else None
    problems = [f"missing {name} {expected[name]}" for name in expected if name not in given]
    problems += [f"unexpected {name}" for name in given if name not in expected]
    arrays = {}
    for name, shape in expected.items():
        if name in given:
            arr, problem = _checked_array(name, given[name], shape)
            if problem:
                problems.append(problem)
            else:
                arrays[name] = arr
    if tied_head is not None and "model.embed_tokens.weight" in arrays:
        head = _to_numpy(tied_head)
        if head.shape != expected["model.embed_tokens.weight"] or \
                not np.array_equal(head.astype(dt, copy=False),
                                   arrays["model.embed_tokens.weight"].astype(dt, copy=False)):
            problems.append("unexpected lm_head.weight: tie_word_embeddings is true and it differs from "
                            "model.embed_tokens.weight")
    if problems:
        raise StateDictError("state dict does not fit the config: " + "; ".join(problems))
    return arrays


def _checked_array(name: str, value, shape: tuple) -> tuple[np.ndarray | None, str]:
    """(the tensor as an array, "") or (None, what is wrong with it)."""
    try:
        arr = _to_numpy(value)
    except Exception as err:                   # noqa: BLE001 - any unreadable value is named
        return None, f"{name} is not an array ({err})"
    if arr.shape != shape:
        return None, f"{name} has shape {arr.shape}, expected {shape}"
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
            or is_half(arr.dtype)):                   # (ml_dtypes' bfloat16 is not np.floating)
        return None, f"{name} holds {arr.dtype}, not numbers"
    if not np.all(np.isfinite(arr)):
        return None, f"{name} holds non-finite values"
    return arr, ""


def _shape_problems(given: dict[str, tuple], cfg: ModelConfig) -> list[str]:
    """What is missing, unexpected or of the wrong shape among tensors of these shapes."""
    expected = hf_parameter_shapes(cfg)
    problems = [f"missing {name} {expected[name]}" for name in expected if name not in given]
    problems += [f"unexpected {name}" for name in given if name not in expected]
    problems += [f"{name} has shape {tuple(shape)}, expected {expected[name]}"
                 for name, shape in given.items() if name in expected and tuple(shape) != expected[name]]
    return problems


def _all_finite(a: np.ndarray, values: int = 2**16) -> bool:
    """True when every value of a (1-D or 2-D) is finite, checked a block of rows of about
    ``values`` numbers at a time (the test's temporary stays small beside a large matrix)."""
    a = a.reshape(1, -1) if a.ndim == 1 else a
    rows = max(1, values // max(1, a.shape[1]))
    return all(np.isfinite(a[lo:lo + rows]).all() for lo in range(0, len(a), rows))


def _assembled(cfg: ModelConfig, dt: np.dtype, vector, fill):
    """(embed, layers, norm, head) of a model, each array allocated once in its final layout and
    dtype and filled by the source: ``vector(name)`` gives a norm gain as the model keeps it
    (``_stored``), ``fill(name, out)`` writes a matrix into ``out`` (its (out, in) view in the
    model's array).  Every matrix is stored transposed, the (out, in) view of a C-contiguous
    (in, out) buffer (the layout ``kvcache.linear`` multiplies fastest); q, k, v rows are stacked
    into wqkv and gate, up rows into w_gate_up.  The norm gains come first: small, and for a
    source that maps a file, the views of its memory are released before the matrices fill."""
    shapes = hf_parameter_shapes(cfg)
    gains = {name: vector(name) for name in shapes if name.endswith("norm.weight")}

    def matrix(*names):
        rows = sum(shapes[n][0] for n in names)
        out = np.empty((shapes[names[0]][1], rows), dt).T               # (out, in) view of (in, out)
        lo = 0
        for name in names:
            fill(name, out[lo:lo + shapes[name][0]])
            lo += shapes[name][0]
        return out

    layers = []
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        layers.append(LayerWeights(
            attn_norm=gains[p + "input_layernorm.weight"],
            wqkv=matrix(p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"),
            wo=matrix(p + "self_attn.o_proj.weight"),
            mlp_norm=gains[p + "post_attention_layernorm.weight"],
            w_gate_up=matrix(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
            w_down=matrix(p + "mlp.down_proj.weight")))
    embed = matrix("model.embed_tokens.weight")
    head = embed if cfg.tie_word_embeddings else matrix("lm_head.weight")
    return embed, layers, gains["model.norm.weight"], head


class Model:
    """A Llama model with numpy weights of one dtype (float32 for speed, float64 for exactness,
    float16 or bfloat16 for half the bytes: see the module doc)."""

    def __init__(self, config: ModelConfig, embed: np.ndarray, layers: list[LayerWeights],
                 norm: np.ndarray, lm_head: np.ndarray):
        self.config = config
        self.embed = embed            # (V, D)
        self.layers = layers
        self.norm = norm              # (D,)
        self.lm_head = lm_head        # (V, D): the embedding table itself when tied
        self.dtype = embed.dtype      # the weights' storage dtype
        # the activations' dtype: float32 for a 2-byte model (kvcache.half), else the weights'
        self.compute_dtype = np.dtype(np.float32) if is_half(self.dtype) else self.dtype
        half = config.head_dim // 2
        self._cos = self._sin = np.empty((0, half), self.compute_dtype)   # (positions, d/2): see _rope
        self._cos_full, self._sin_full = full_width(self._cos, self._sin)  # (positions, d)

    # ------------------------------------------------------------------ building

    @classmethod
    def from_hf(cls, state_dict: dict, config, dtype=np.float32, consume: bool = False) -> "Model":
        """A model from transformers' LlamaForCausalLM tensors and its config.json dict.

        ``state_dict`` maps transformers' names to arrays (numpy, or torch tensors).  Every problem
        is reported at once, each tensor by name: missing, unexpected, wrong shape, not numbers,
        not finite.  ``lm_head.weight`` may accompany tied embeddings only if it equals the
        embedding table (as ``model.state_dict()`` of a tied model has it).

        Each tensor is copied once into the model, cast to ``dtype`` in that copy.  ``state_dict``
        is left alone, unless ``consume``: then each tensor is removed from it as soon as it is
        copied (a loader's own dict), so the dict and the model never both hold every weight.
        """
        cfg = ModelConfig.from_dict(config)
        dt = _dtype(dtype)
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"state_dict must map tensor names to arrays, got {type(state_dict).__name__}")
        arrays = _checked_arrays(state_dict, cfg, dt)
        if consume and cfg.tie_word_embeddings:
            state_dict.pop("lm_head.weight", None)            # the table's copy, checked equal above

        def take(name):                       # the source, dropped here (and from a consumed dict)
            if consume:
                state_dict.pop(name, None)
            return arrays.pop(name)

        def fill(name, out):
            out[...] = take(name)

        return cls(cfg, *_assembled(cfg, dt, lambda name: np.array(_stored(name, take(name), dt)), fill))

    @classmethod
    def from_gguf(cls, source, dtype=np.float32) -> "Model":
        """A model from a GGUF file (a path, a ``gguf.GGUFReader`` on it, or its
        ``kvcache.gguf_file.TensorFile``), streamed: each tensor is dequantized a chunk at a time
        straight into the model's own array (``_assembled``), so loading never holds a second copy
        of the weights.  (A caller done with its reader passes the ``TensorFile`` and drops the
        reader: the reader's parsed metadata then leaves memory before the arrays fill.)

        Refused before anything is read: the config (``read_config``), tensors of types or names
        the engine does not read, and tensors missing, unexpected or of the wrong shape (every one
        named).  A tensor holding non-finite values is named once all are read."""
        dt = _dtype(dtype)
        if not isinstance(source, TensorFile):
            source = TensorFile(open_gguf(source) if isinstance(source, (str, Path)) else source)
        tensors = source                # a reader opened here is unmapped: only the tensor list is kept
        cfg = ModelConfig.from_dict(tensors.config)
        problems = _shape_problems(tensors.shapes(), cfg)
        if problems:
            raise StateDictError("GGUF file does not fit its config: " + "; ".join(problems))
        not_finite = []

        def vector(name):
            gain = _stored(name, tensors.read(name), dt)
            if not _all_finite(gain):
                not_finite.append(name)
            return gain

        def fill(name, out):
            tensors.read_into(name, out)
            if not _all_finite(out):
                not_finite.append(name)

        parts = _assembled(cfg, dt, vector, fill)
        if not_finite:
            raise StateDictError(f"GGUF tensor(s) hold non-finite values: {', '.join(not_finite)}")
        return cls(cfg, *parts)

    @classmethod
    def load(cls, path, dtype=np.float32) -> "Model":
        """A model from a folder written by ``save_pretrained`` (config.json and safetensors) or a
        GGUF file (``kvcache.gguf_file``).  An installed model by its name, with its tokenizer:
        ``kvcache.models.load_with_tokenizer(name)``."""
        path = Path(path)
        if is_gguf(path):
            return cls.from_gguf(path, dtype)
        config = read_config(path)
        cfg = ModelConfig.from_dict(config)        # refuse an unsupported model before reading tensors
        return cls.from_hf(read_state_dict(path), cfg, dtype, consume=True)

    @classmethod
    def random(cls, config, seed: int = 0, dtype=np.float32) -> "Model":
        """A model with random weights (``random_state_dict``, fixed seed), for the chapters and
        the benchmarks."""
        cfg = ModelConfig.from_dict(config)
        return cls.from_hf(random_state_dict(cfg, seed), cfg, dtype, consume=True)

    def astype(self, dtype) -> "Model":
        """The same model with its weights at ``dtype``: each value rounded to it, as loading the
        same checkpoint at ``dtype`` would store it (2-byte models keep float32 norm gains)."""
        dt = _dtype(dtype)

        def cast(name, a):
            return _stored(name, a, dt)

        layers = [LayerWeights(**{f: cast(("norm.weight" if f.endswith("norm") else f), getattr(w, f))
                                  for f in ("attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down")})
                  for w in self.layers]
        embed = cast("embed", self.embed)
        head = embed if self.lm_head is self.embed else cast("lm_head", self.lm_head)
        return type(self)(self.config, embed, layers, cast("norm.weight", self.norm), head)

    # ------------------------------------------------------------------ one layer, either attention

    def layer(self, x, w: LayerWeights, cos, sin, cache: LayerCache | None = None,
              plan: StepPlan | None = None):
        """x (N, D) -> (N, D), updated in place (x is the residual stream, the model's own array).
        Without a cache the N tokens are one sequence and attend causally to each other; with one,
        the step's keys and values are written into the layer's cache and its queries attend to
        it, as the step's ``plan`` says (``KVCache.reserve``)."""
        cfg = self.config
        N = x.shape[0]
        h = rms_norm(x, w.attn_norm, cfg.rms_norm_eps)
        qkv = linear(h, w.wqkv)                                         # (N, H d + 2 G d)
        H, G = cfg.num_attention_heads, cfg.num_key_value_heads
        qk = apply_rope(qkv[:, : cfg.q_width + cfg.kv_width].reshape(N, H + G, cfg.head_dim), cos, sin)
        q, k = qk[:, :H], qk[:, H:]                                     # (N, H, d), (N, G, d)
        v = qkv[:, cfg.q_width + cfg.kv_width:].reshape(N, G, cfg.head_dim)
        if cache is None:
            o = causal_attention(q, k, v)                               # (N, H, d)
        else:
            cache.update(k, v, plan)
            o = cache.attend(q, plan)                                   # (N, H, d)
        x += linear(o.reshape(N, cfg.q_width), w.wo)
        x += swiglu(rms_norm(x, w.mlp_norm, cfg.rms_norm_eps), w.w_gate_up, w.w_down)
        return x

    def _embed_rows(self, ids: np.ndarray) -> np.ndarray:
        """The embedding table's rows ``ids``: (N,) -> (N, D), a new C-contiguous array (the
        residual stream every layer updates in place).  The table is stored transposed, (D, V)
        in memory, as the output layer it also is multiplies fastest: the rows are gathered as
        columns of that buffer, in the compute dtype."""
        rows = np.ascontiguousarray(self.embed.T[:, ids].T)
        return rows.astype(self.compute_dtype, copy=False)             # exact for 2-byte rows

    def _head(self, x):
        """Final norm and output layer: (n, D) -> (n, V)."""
        return linear(rms_norm(x, self.norm, self.config.rms_norm_eps), self.lm_head)

    def _rope(self, positions):
        """cos and sin of the positions (N,), looked up in a table of the first positions: (N, d/2)
        each, or at full width (N, d) for at most ROPE_FULL_WIDTH positions (``apply_rope`` takes
        either, with the same numbers; full width is faster for a few tokens).

        The table is computed once (``rope_cos_sin``, the same numbers) and doubled when a
        position passes its end, up to max_position_embeddings: a decode step looks up one row
        per sequence instead of computing its angles again."""
        top = int(positions.max()) + 1 if len(positions) else 0
        if top > len(self._cos):
            n = min(max(top, 2 * len(self._cos), 1024), self.config.max_position_embeddings)
            self._cos, self._sin = rope_cos_sin(np.arange(n), self.config.head_dim, self.config.rope_theta,
                                                self.compute_dtype)
            self._cos_full, self._sin_full = full_width(self._cos, self._sin)
        if len(positions) <= ROPE_FULL_WIDTH:
            return self._cos_full[positions], self._sin_full[positions]
        return self._cos[positions], self._sin[positions]

    # ------------------------------------------------------------------ no cache: the reference

    def check_tokens(self, token_ids, what: str = "token ids") -> np.ndarray:
        """token_ids as an int64 array (N,), or a ValueError naming the first bad one."""
        return validate.token_ids(token_ids, self.config.vocab_size, what)

    def _hidden_no_cache(self, token_ids) -> np.ndarray:
        ids = self.check_tokens(token_ids)
        T = len(ids)
        if T == 0:
            raise ValueError("token ids are empty: there is nothing to compute")
        if T > self.config.max_position_embeddings:
            raise ValueError(f"{T} tokens exceed max_position_embeddings ({self.config.max_position_embeddings})")
        cos, sin = self._rope(np.arange(T))
        x = self._embed_rows(ids)                                       # (T, D)
        for w in self.layers:
            x = self.layer(x, w, cos, sin)
        return x

    def logits(self, token_ids) -> np.ndarray:
        """The logits of every position of one sequence, recomputed from scratch: (T,) -> (T, V)."""
        return self._head(self._hidden_no_cache(token_ids))

    def next_logits(self, token_ids) -> np.ndarray:
        """The logits after the last token, recomputed from scratch (no cache): (T,) -> (V,)."""
        return self._head(self._hidden_no_cache(token_ids)[-1:])[0]

    # ------------------------------------------------------------------ with a cache

    def new_cache(self, batch: int, max_len: int | None = None, kind: str = "contiguous", dtype=None,
                  capacity: int | None = None, **options) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``max_len`` tokens (default: the model's
        max_position_embeddings), in layout ``kind`` and storage ``dtype`` (default: the model's)."""
        cfg = self.config
        max_len = cfg.max_position_embeddings if max_len is None else max_len
        if not validate.is_whole(max_len) or not 1 <= max_len <= cfg.max_position_embeddings:
            raise ValueError(f"max_len must be an integer from 1 to max_position_embeddings "
                             f"({cfg.max_position_embeddings}), got {max_len!r}")
        return new_cache(kind, n_layers=cfg.num_hidden_layers, batch=batch,
                         kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, max_len=int(max_len),
                         dtype=self.dtype.name if dtype is None else dtype, compute_dtype=self.compute_dtype,
                         capacity=capacity, **options)

    def forward(self, tokens, counts, cache: KVCache, every_token: bool = False) -> np.ndarray:
        """counts[b] new tokens for each sequence b of ``cache``; returns the logits after each
        sequence's last new token, (B, V), or with ``every_token`` after each new token, (N, V)
        in the packed order (what speculative decoding verifies a draft with).  The cache grows
        by counts[b] positions per row.

        tokens (N,) packed, sequence 0's first; N = sum(counts).  Everything is checked (token
        ids, counts, room in the cache) before anything is written.
        """
        ids = self.check_tokens(tokens)
        counts = validate.step_counts(counts, cache.batch)
        if len(ids) != int(counts.sum()):
            raise ValueError(f"{len(ids)} tokens given for counts summing to {int(counts.sum())}")
        return self._step(ids, counts, cache, validate.flag(every_token, "every_token"))

    def forward_hidden(self, tokens, counts, cache: KVCache) -> np.ndarray:
        """``forward`` without the output layer: the final hidden states after each new token,
        (N, D) in the packed order; ``head`` turns any of them into logits."""
        ids = self.check_tokens(tokens)
        counts = validate.step_counts(counts, cache.batch)
        if len(ids) != int(counts.sum()):
            raise ValueError(f"{len(ids)} tokens given for counts summing to {int(counts.sum())}")
        self._check_positions(cache.lengths, counts)
        return self._hidden_cached(ids, cache.reserve(counts), cache)

    def head(self, hidden: np.ndarray) -> np.ndarray:
        """The logits of final hidden states: (n, D) -> (n, V)."""
        return self._head(hidden)

    def _step(self, ids: np.ndarray, counts: np.ndarray, cache: KVCache, every_token: bool = False) -> np.ndarray:
        """``forward`` on checked arguments: ids (N,) int64 in the vocabulary, counts (B,) >= 1
        summing to N."""
        self._check_positions(cache.lengths, counts)
        plan = cache.reserve(counts)
        x = self._hidden_cached(ids, plan, cache)
        if not plan.is_decode and not every_token:
            x = x[plan.offsets[1:] - 1]                                 # each row's last new token
        return self._head(x)

    def _check_positions(self, lengths: np.ndarray, counts: np.ndarray) -> None:
        """A ValueError when a sequence would pass max_position_embeddings."""
        last = int((lengths + counts).max(initial=0))
        if last > self.config.max_position_embeddings:
            raise ValueError(f"a sequence would reach {last} tokens, past max_position_embeddings "
                             f"({self.config.max_position_embeddings})")

    def _hidden_cached(self, ids: np.ndarray, plan: StepPlan, cache: KVCache) -> np.ndarray:
        """The final hidden states (N, D) of the step's tokens, writing their keys and values."""
        cos, sin = self._rope(plan.positions)
        x = self._embed_rows(ids)                                       # (N, D)
        for w, layer_cache in zip(self.layers, cache):
            x = self.layer(x, w, cos, sin, layer_cache, plan)
        return x

    def prefill(self, prompts, cache: KVCache, padded: bool = False) -> np.ndarray:
        """Run whole prompts (one per sequence of ``cache``, all empty) -> logits (B, V).

        Ragged (default): the prompts are packed end to end, N = sum(T_b) tokens, and each
        attends to its own keys only: no token is wasted, and since the cache keeps one length
        per sequence, no padding is stored to be read again at every decode step (transformers
        left-pads a batch and masks the pads, which stay in its cache).  ``padded=True`` computes
        what a rectangular batch would: every prompt right-padded to T_max = max(T_b) (B T_max
        tokens), then each sequence's length set back to T_b (attention is causal: the real
        tokens never see the padding after them).  The same logits; what the padding costs is
        measured in bench_engine.
        """
        prompts = [self.check_tokens(p, f"prompt {i}") for i, p in enumerate(prompts)]
        if len(prompts) != cache.batch or np.any(np.asarray(cache.lengths) != 0):
            raise ValueError(f"prefill needs an empty cache with one sequence per prompt "
                             f"({len(prompts)} prompts, cache of {cache.batch})")
        lengths = np.array([len(p) for p in prompts], np.int64)
        if np.any(lengths < 1):
            raise ValueError(f"prompt {int(np.flatnonzero(lengths < 1)[0])} is empty")
        if not padded:
            return self._step(np.concatenate(prompts), lengths, cache)
        T = int(lengths.max())
        counts = np.full(len(prompts), T, np.int64)
        self._check_positions(cache.lengths, counts)
        plan = cache.reserve(counts)
        tokens = np.concatenate([np.concatenate([p, np.zeros(T - len(p), np.int64)]) for p in prompts])
        x = self._hidden_cached(tokens, plan, cache)                   # (B T, D)
        cache.crop(lengths)                                             # forget the padding
        return self._head(x[np.arange(len(prompts)) * T + lengths - 1])

    def logits_through_cache(self, token_ids, cache_dtype=None) -> np.ndarray:
        """The logits of every position of one sequence, (T,) -> (T, V), computed as one prefill
        into a new cache of storage ``cache_dtype`` (default: the model's): attention reads the
        keys and values as that format stores them, so the result shows what the format costs
        (teacher forcing: every position predicts the next from the true tokens before it)."""
        ids = self.check_tokens(token_ids)
        if len(ids) == 0:
            raise ValueError("token ids are empty: there is nothing to compute")
        cache = self.new_cache(1, len(ids), dtype=cache_dtype)
        counts = np.array([len(ids)], np.int64)
        self._check_positions(cache.lengths, counts)
        return self._head(self._hidden_cached(ids, cache.reserve(counts), cache))

    def decode(self, tokens, cache: KVCache) -> np.ndarray:
        """One new token per sequence: tokens (B,) -> logits (B, V)."""
        ids = self.check_tokens(tokens)
        if len(ids) != cache.batch:
            raise ValueError(f"{len(ids)} tokens given for counts summing to {cache.batch}")
        return self._step(ids, np.ones(cache.batch, np.int64), cache)
