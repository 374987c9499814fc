"""Reading config.json: both transformers layouts, defaults, and refusals by name."""
from __future__ import annotations

import pytest

from kvcache.config import IGNORED_KEYS, ModelConfig, UnsupportedConfig

# config.json of a Llama checkpoint as transformers 4 wrote it (the SmolLM-135M sizes)
V4 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
      "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
      "initializer_range": 0.02, "intermediate_size": 1536, "max_position_embeddings": 2048,
      "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
      "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
      "tie_word_embeddings": True, "torch_dtype": "float32", "transformers_version": "4.40.0.dev0",
      "use_cache": True, "vocab_size": 49152}


def test_a_transformers_4_config():
    cfg = ModelConfig.from_dict(V4)
    assert (cfg.head_dim, cfg.group_size, cfg.q_width, cfg.kv_width) == (64, 3, 576, 192)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 10000.0 and cfg.eos_token_id == 0


def test_a_transformers_5_config_keeps_theta_in_rope_parameters():
    v5 = {k: v for k, v in V4.items() if k not in ("rope_theta", "rope_scaling")}
    v5["rope_parameters"] = {"rope_theta": 500000.0, "rope_type": "default"}
    assert ModelConfig.from_dict(v5).rope_theta == 500000.0


def test_defaults_are_transformers_llama_defaults():
    cfg = ModelConfig.from_dict({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
                                 "num_hidden_layers": 1, "num_attention_heads": 2})
    assert (cfg.num_key_value_heads, cfg.head_dim, cfg.max_position_embeddings) == (2, 4, 2048)
    assert (cfg.rms_norm_eps, cfg.rope_theta, cfg.tie_word_embeddings) == (1e-6, 10000.0, False)


def test_round_trip_through_to_dict():
    cfg = ModelConfig.from_dict(V4)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("change, words", [
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling of type 'linear'"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "'dynamic'"),
    ({"rope_scaling": {"rope_type": "default", "factor": 2.0}}, "'factor'"),
    ({"rope_scaling": "yes"}, "rope_scaling='yes'"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
    ({"model_type": "qwen2"}, "model_type 'qwen2'"),
    ({"architectures": ["LlamaForSequenceClassification"]}, "LlamaForSequenceClassification"),
    ({"hidden_act": "gelu_pytorch_tanh"}, "hidden_act='gelu_pytorch_tanh'"),
    ({"attention_bias": True}, "attention_bias=True"),
    ({"mlp_bias": True}, "mlp_bias=True"),
    ({"sliding_window": 4096, "layer_types": []}, "'layer_types', 'sliding_window'"),
])
def test_unsupported_settings_are_refused_by_name(change, words):
    with pytest.raises(UnsupportedConfig) as err:
        ModelConfig.from_dict({**V4, **change})
    assert words in str(err.value)


@pytest.mark.parametrize("change, words", [
    ({"num_key_value_heads": 4}, "multiple of num_key_value_heads"),
    ({"hidden_size": 577}, "hidden_size \\(577\\) must be a multiple"),
    ({"head_dim": 63}, "head_dim must be even"),
    ({"vocab_size": 0}, "vocab_size must be a positive integer"),
    ({"num_hidden_layers": 2.0}, "num_hidden_layers must be a positive integer"),
    ({"rms_norm_eps": -1.0}, "rms_norm_eps must be a positive number"),
    ({"rope_theta": float("inf")}, "rope_theta must be a positive number"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
])
def test_impossible_sizes_are_refused(change, words):
    with pytest.raises(ValueError, match=words):
        ModelConfig.from_dict({**V4, **change})


def test_missing_sizes_are_named():
    partial = {k: v for k, v in V4.items() if k not in ("vocab_size", "intermediate_size")}
    with pytest.raises(ValueError, match="config lacks vocab_size, intermediate_size"):
        ModelConfig.from_dict(partial)
    with pytest.raises(TypeError, match="config must be a dict"):
        ModelConfig.from_dict([1, 2])


def test_harmless_keys_are_ignored():
    assert {"torch_dtype", "bos_token_id", "use_cache", "pretraining_tp"} <= IGNORED_KEYS
    ModelConfig.from_dict({**V4, "pad_token_id": 2, "_name_or_path": "x", "attention_dropout": 0.1})
