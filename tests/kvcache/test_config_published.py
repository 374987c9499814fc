"""The config key rule on the config.json files real Llama checkpoints are published with.

A key that transformers' Llama reads is implemented or refused by name; one it does not read
(metadata, other tools' notes) is ignored; a setting of a related architecture that changes the
forward pass (sliding windows, interleaved rotary pairs...) is refused unless it is neutral.
"""
from __future__ import annotations

import pytest

from kvcache.config import ModelConfig, UnsupportedConfig

# HuggingFaceTB/SmolLM2-135M, as transformers 4.48 printed its LlamaConfig (README of the public
# repository satyasundar/erav3-s13): the published config.json plus the keys transformers adds
# when it saves (_name_or_path, head_dim, mlp_bias).
SMOLLM2_135M = {
    "_name_or_path": "HuggingFaceTB/SmolLM2-135M", "architectures": ["LlamaForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041666666666666664,
    "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 2048, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_scaling": None,
    "rope_theta": 100000, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.48.0", "use_cache": True, "vocab_size": 49152,
}

# HuggingFaceTB/SmolLM2-360M-Instruct's config.json, written from its model card (the sizes agree
# with the public repository JXL884/Entropy-aware-branching, entropix/models/smollm.py: width 960,
# 32 layers, 15 query heads over 5 KV heads); the Instruct models carry transformers.js' note.
SMOLLM2_360M_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 960,
    "initializer_range": 0.02, "intermediate_size": 2560, "is_llama_config": True,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 15,
    "num_hidden_layers": 32, "num_key_value_heads": 5, "pad_token_id": 2, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_scaling": None, "rope_theta": 100000,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
    "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}},
    "use_cache": True, "vocab_size": 49152,
}

# TinyLlama/TinyLlama-1.1B-Chat-v1.0's config.json (a public copy found by the code search,
# completed from the model card: bfloat16 weights, transformers 4.35, vocabulary 32,000).
TINYLLAMA_CHAT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
    "pad_token_id": 0, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.35.0", "use_cache": True, "vocab_size": 32000,
}

# meta-llama/Llama-3.2-1B-Instruct, as the public repository kevinstephano/thunder_model_blocks
# (hf_llama/llama_config.py) copied it, with the _name_or_path and _commit_hash of a download.
LLAMA_32_1B = {
    "_name_or_path": "meta-llama/Llama-3.2-1B-Instruct", "architectures": ["LlamaForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
    "_commit_hash": "4e20de362430cd3b72f300e6b0f18e50e7166e08",
}


@pytest.mark.parametrize("config, sizes", [
    # (V, D, F, L, H, G, d, theta, tied, positions, eos): the model cards' figures
    (SMOLLM2_135M, (49152, 576, 1536, 30, 9, 3, 64, 100000, True, 2048, 0)),
    (SMOLLM2_360M_INSTRUCT, (49152, 960, 2560, 32, 15, 5, 64, 100000, True, 8192, 2)),
    (TINYLLAMA_CHAT, (32000, 2048, 5632, 22, 32, 4, 64, 10000.0, False, 2048, 2)),
], ids=["SmolLM2-135M", "SmolLM2-360M-Instruct", "TinyLlama-1.1B-Chat"])
def test_published_configs_load_with_their_sizes(config, sizes):
    cfg = ModelConfig.from_dict(config)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers,
            cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rope_theta,
            cfg.tie_word_embeddings, cfg.max_position_embeddings, cfg.eos_token_id) == sizes


def test_llama_3_2_is_refused_for_its_rotary_scaling_alone():
    with pytest.raises(UnsupportedConfig, match="rope_scaling of type 'llama3' is not supported"):
        ModelConfig.from_dict(LLAMA_32_1B)
    plain = {**LLAMA_32_1B, "rope_scaling": None}        # everything else in it is understood
    assert ModelConfig.from_dict(plain).num_key_value_heads == 8


def test_the_keys_the_issue_named_are_ignored_as_metadata():
    """What a config saved by transformers from this model, and the published ones, carry."""
    saved = {**SMOLLM2_135M, "_model_name_or_path": "x", "unk_token_id": 0,
             "quantization_config": {"quant_method": "gguf", "dequantize": False, "gguf_file": "m.gguf"}}
    assert ModelConfig.from_dict(saved) == ModelConfig.from_dict(SMOLLM2_135M)
    # a key no reader knows changes nothing transformers computes: ignored
    assert ModelConfig.from_dict({**SMOLLM2_135M, "some_tool_note": {"a": 1}}) == ModelConfig.from_dict(SMOLLM2_135M)


@pytest.mark.parametrize("change, words", [
    ({"rope_interleaved": True}, "'rope_interleaved' not supported"),
    ({"sliding_window": 4096}, "sliding_window=4096"),
    ({"final_logit_softcapping": 30.0}, "'final_logit_softcapping'"),
    ({"num_local_experts": 8}, "'num_local_experts'"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "'quantization_config'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "'yarn'"),
    ({"attention_bias": True}, "attention_bias=True"),
])
def test_settings_that_change_the_model_are_refused_by_name(change, words):
    with pytest.raises(UnsupportedConfig, match=words):
        ModelConfig.from_dict({**SMOLLM2_360M_INSTRUCT, **change})


def test_neutral_values_of_refused_keys_pass():
    neutral = {"sliding_window": None, "use_sliding_window": False, "rope_interleaved": False,
               "embedding_multiplier": 1.0, "num_local_experts": 0, "quantization_config": None}
    assert ModelConfig.from_dict({**TINYLLAMA_CHAT, **neutral}) == ModelConfig.from_dict(TINYLLAMA_CHAT)
    with pytest.raises(UnsupportedConfig, match="use_sliding_window"):
        ModelConfig.from_dict({**TINYLLAMA_CHAT, "use_sliding_window": True})
