"""The numbers that define a Llama-architecture model, read from a Hugging Face ``config.json``.

A Llama model is fixed by a handful of sizes::

    V   vocab_size                 rows of the embedding table and of the output layer
    D   hidden_size                width of a token's hidden state
    F   intermediate_size          width of the feed-forward (SwiGLU) hidden layer
    L   num_hidden_layers          decoder layers
    H   num_attention_heads        query heads
    G   num_key_value_heads        key/value heads (H a multiple of G: H / G query heads share one)
    d   head_dim                   width of one head (D / H unless the config says otherwise)

plus ``max_position_embeddings`` (the positions it was trained on), ``rms_norm_eps`` and
``rope_theta`` (the base of the rotary frequencies), and ``tie_word_embeddings`` (the output layer
reuses the embedding table).

Which keys count is decided by what transformers' ``LlamaConfig`` and ``LlamaForCausalLM``
actually read to compute the logits: the sizes above, ``hidden_act``, ``attention_bias``,
``mlp_bias``, the rotary settings (``rope_theta``, ``rope_scaling`` or ``rope_parameters``,
``partial_rotary_factor``), ``tie_word_embeddings`` and ``quantization_config``.  Each is either
implemented or refused by name at a value this engine does not implement (``UnsupportedConfig``:
Llama-3's rotary scaling, biases, another activation, quantized weights).  A key they do not read
cannot change what transformers computes, so it is ignored: token ids, training settings
(``attention_dropout``, ``pretraining_tp``: slices of the same products), bookkeeping
(``_name_or_path``, ``torch_dtype``, ``use_cache``; ``IGNORED_KEYS`` lists the common ones) and
other tools' notes (``transformers.js_config``, ``is_llama_config``).  The exception is a setting
that changes the forward pass of the models that write it and that neither transformers' Llama
nor this engine implements (``REFUSED_KEYS``: sliding windows, logit soft-capping, mixtures of
experts, interleaved rotary pairs...): at any value but its neutral one it is refused by name,
since ignoring it would run a different model than the one the checkpoint was trained as.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["ModelConfig", "UnsupportedConfig", "IGNORED_KEYS", "REFUSED_KEYS"]


class UnsupportedConfig(ValueError):
    """The config asks for something this engine does not implement (named in the message)."""


# Keys that do not change what the model computes at inference: token ids used by generation,
# training-only settings, bookkeeping written by transformers.  (pretraining_tp splits the
# projections into slices for a tensor-parallel training run; the product is the same.)
IGNORED_KEYS = frozenset({
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "torch_dtype", "dtype", "transformers_version", "_name_or_path", "use_cache",
    "initializer_range", "attention_dropout", "pretraining_tp", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "add_cross_attention", "tie_encoder_decoder",
    "id2label", "label2id", "problem_type", "finetuning_task", "tokenizer_class", "prefix",
    "task_specific_params", "cross_attention_hidden_size", "tf_legacy_loss",
    "use_bfloat16", "pruned_heads", "_attn_implementation", "_attn_implementation_autoset",
    "quantization_config_applied", "_model_name_or_path", "unk_token_id", "is_llama_config",
    "transformers.js_config", "_commit_hash", "model_name", "max_length", "generation_config",
})

# Settings of related architectures that change the forward pass when set, read by neither
# transformers' Llama nor this engine, each with the values that mean "not set".
REFUSED_KEYS = {
    "sliding_window": (None,), "use_sliding_window": (False, None), "max_window_layers": (None,),
    "layer_types": (None,), "rope_interleaved": (False, None),
    "attn_logit_softcapping": (None,), "final_logit_softcapping": (None,),
    "query_pre_attn_scalar": (None,), "qk_layernorm": (False, None), "use_qk_norm": (False, None),
    "embedding_multiplier": (None, 1, 1.0), "logits_scaling": (None, 1, 1.0),
    "residual_multiplier": (None, 1, 1.0), "attention_multiplier": (None,),
    "num_local_experts": (None, 0), "num_experts": (None, 0), "num_experts_per_tok": (None, 0),
    "no_rope_layers": (None,), "quantization_config": (None,),
}

# What the Llama architecture itself pins: a value other than these is a different model.
_FIXED = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False}


def _refuse_other_models(cfg: dict) -> None:
    """Pop the keys that name the model (type, architecture, fixed choices such as the activation)
    and refuse any but Llama's."""
    model_type = cfg.pop("model_type", "llama")
    if model_type != "llama":
        raise UnsupportedConfig(f"model_type {model_type!r} is not supported: this engine runs the "
                                "Llama architecture (model_type 'llama') only")
    architectures = cfg.pop("architectures", None)
    if architectures is not None and list(architectures) != ["LlamaForCausalLM"]:
        raise UnsupportedConfig(f"architectures {architectures!r} is not supported: this engine runs "
                                "LlamaForCausalLM only")
    for key, expected in _FIXED.items():
        value = cfg.pop(key, expected)
        if value != expected:
            raise UnsupportedConfig(f"{key}={value!r} is not supported (this engine implements "
                                    f"{key}={expected!r} only)")


def _refuse_changing_keys(cfg: dict) -> None:
    """Refuse, by name, every key that would change the model and that the engine does not
    implement (a GGUF file's quantization, which transformers dequantized, is dropped)."""
    quantization = cfg.get("quantization_config")
    if isinstance(quantization, dict) and quantization.get("quant_method") == "gguf":
        del cfg["quantization_config"]       # transformers dequantized a GGUF file: plain tensors
    refused = sorted(k for k in cfg if k in REFUSED_KEYS and not _neutral(cfg[k], REFUSED_KEYS[k]))
    if refused:
        raise UnsupportedConfig(f"config key(s) {', '.join(map(repr, refused))} not supported by this "
                                "engine: refused rather than ignored, since they change the model "
                                f"({', '.join(f'{k}={cfg[k]!r}' for k in refused)})")


def _head_dim(hidden, heads) -> int:
    """The head width when config.json does not give it: hidden_size / num_attention_heads."""
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads < 1 or hidden % heads:
        raise ValueError(f"config hidden_size ({hidden!r}) must be a multiple of num_attention_heads "
                         f"({heads!r}) when head_dim is not given")
    return hidden // heads


@dataclass(frozen=True)
class ModelConfig:
    """The sizes of a Llama model (see the module docstring for the letters)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    eos_token_id: int | tuple[int, ...] | None = None   # what generation stops on, when asked

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim",
                     "max_position_embeddings"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"config {name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"config num_attention_heads ({self.num_attention_heads}) must be a multiple "
                             f"of num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise ValueError(f"config head_dim must be even for rotary positions, got {self.head_dim}")
        for name in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"config {name} must be a positive number, got {value!r}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"config tie_word_embeddings must be true or false, got {self.tie_word_embeddings!r}")

    # ------------------------------------------------------------------ derived sizes

    @property
    def group_size(self) -> int:
        """Query heads per key/value head: H / G (1 for plain multi-head attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def q_width(self) -> int:
        """H d: the width of all query heads together."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """G d: the width of all key (or value) heads together."""
        return self.num_key_value_heads * self.head_dim

    # ------------------------------------------------------------------ reading config.json

    @classmethod
    def from_dict(cls, config: dict) -> "ModelConfig":
        """Read a ``config.json`` dict of a ``LlamaForCausalLM`` (transformers 4 or 5 layout).

        Missing optional keys take transformers' LlamaConfig defaults.  Refused, by name: another
        ``model_type`` or architecture, an activation other than SiLU, attention or MLP biases, a
        ``rope_scaling`` / ``rope_parameters`` type other than the default, a partial rotary
        factor, and any key not known to be harmless.
        """
        if isinstance(config, ModelConfig):
            return config
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict (the keys of config.json), got {type(config).__name__}")
        cfg = dict(config)
        _refuse_other_models(cfg)
        rope_theta = _rope_theta(cfg)
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads")
        missing = [k for k in required if k not in cfg]
        if missing:
            raise ValueError(f"config lacks {', '.join(missing)}")
        eos = cfg.get("eos_token_id")
        if isinstance(eos, list):
            eos = tuple(eos)
        _refuse_changing_keys(cfg)
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        head_dim = cfg.get("head_dim")
        if head_dim is None:
            head_dim = _head_dim(hidden, heads)
        kv_heads = cfg.get("num_key_value_heads")
        return cls(
            vocab_size=cfg["vocab_size"], hidden_size=hidden,
            intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads, num_key_value_heads=heads if kv_heads is None else kv_heads,
            head_dim=head_dim,
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=rope_theta,
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            eos_token_id=eos if eos is None or isinstance(eos, tuple) else int(eos),
        )

    def to_dict(self) -> dict:
        """The config.json keys (transformers' names) of this config."""
        out = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu"}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["rope_scaling"] = None
        return out


def _neutral(value, neutral: tuple) -> bool:
    """True when ``value`` is one of the values that leave the forward pass as it is (booleans
    compared as booleans: True is not the neutral 1)."""
    return any(value is n if isinstance(n, bool) or n is None or isinstance(value, bool) else value == n
               for n in neutral)


def _rope_theta(cfg: dict) -> float:
    """rope_theta from either layout, refusing every rotary variant but the default.

    transformers 4 writes ``rope_theta`` and ``rope_scaling`` (null, or a dict with ``type`` or
    ``rope_type``); transformers 5 writes ``rope_parameters`` = {"rope_theta", "rope_type"}.
    Linear, dynamic, YaRN, Llama-3 and LongRoPE scaling all change the frequencies: refused.
    """
    theta = cfg.pop("rope_theta", None)
    for key in ("rope_scaling", "rope_parameters"):
        params = cfg.pop(key, None)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise UnsupportedConfig(f"{key}={params!r} is not supported (expected null or a dict)")
        params = dict(params)
        kind = params.pop("rope_type", params.pop("type", "default"))
        if kind != "default":
            raise UnsupportedConfig(f"{key} of type {kind!r} is not supported: this engine implements the "
                                    "default rotary positions only")
        if "rope_theta" in params:
            theta = params.pop("rope_theta")
        factor = params.pop("partial_rotary_factor", 1.0)
        if factor != 1.0:
            raise UnsupportedConfig(f"partial_rotary_factor={factor!r} is not supported (all of each head rotates)")
        if params:
            raise UnsupportedConfig(f"{key} setting(s) {', '.join(map(repr, sorted(params)))} not supported")
    factor = cfg.pop("partial_rotary_factor", 1.0)
    if factor != 1.0:
        raise UnsupportedConfig(f"partial_rotary_factor={factor!r} is not supported (all of each head rotates)")
    return 10000.0 if theta is None else theta
