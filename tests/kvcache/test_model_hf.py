"""The numpy Llama against Hugging Face transformers: the same weights give the same logits.

transformers computes RMSNorm and the rotary angles in float32 even in a float64 model, so the
two agree to about 1e-7, not to 1e-15: the tolerance is 1e-5 relative.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine_helpers import CONFIGS, engine_model, hf_llama, numpy_state_dict, random_prompts
from kvcache.checkpoint import CheckpointError
from kvcache.config import UnsupportedConfig
from kvcache.model import Model, StateDictError


def hf_logits(hf_model, ids) -> np.ndarray:
    with torch.no_grad():
        return hf_model(torch.tensor([list(ids)])).logits[0].numpy()


def assert_close_logits(got, ref, rtol=1e-5):
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * np.abs(ref).max())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_match_transformers(name):
    hf = hf_llama(name)
    model = engine_model(hf)
    for ids in random_prompts(CONFIGS[name]["vocab_size"], (1, 9, 40), seed=1):
        ref = hf_logits(hf, ids)
        assert_close_logits(model.logits(ids), ref)
        assert_close_logits(model.next_logits(ids), ref[-1])


def test_float32_model_matches_float32_transformers():
    hf = hf_llama("gqa-untied").float()
    model = Model.from_hf(numpy_state_dict(hf), hf.config.to_dict(), dtype=np.float32)
    assert model.dtype == np.float32
    ids = random_prompts(96, (30,), seed=2)[0]
    assert_close_logits(model.logits(ids), hf_logits(hf, ids), rtol=2e-4)


def test_torch_tensors_are_accepted_and_the_tied_copy_too():
    hf = hf_llama("mha-tied")
    state = hf.state_dict()                        # torch tensors; lm_head.weight is the tied table
    assert "lm_head.weight" in state
    model = Model.from_hf(state, hf.config.to_dict(), dtype=np.float64)
    ids = [3, 1, 4, 1, 5]
    assert_close_logits(model.logits(ids), hf_logits(hf, ids))


# ---------------------------------------------------------------------- bad state dicts


def _good():
    hf = hf_llama("gqa-untied")
    return numpy_state_dict(hf), hf.config.to_dict()


def test_missing_extra_and_misshaped_tensors_are_named():
    state, config = _good()
    del state["model.layers.1.mlp.up_proj.weight"]
    state["model.layers.0.self_attn.q_proj.bias"] = np.zeros(32)
    state["model.layers.0.self_attn.k_proj.weight"] = np.zeros((32, 32))
    with pytest.raises(StateDictError) as err:
        Model.from_hf(state, config)
    msg = str(err.value)
    assert "missing model.layers.1.mlp.up_proj.weight" in msg
    assert "unexpected model.layers.0.self_attn.q_proj.bias" in msg
    assert "model.layers.0.self_attn.k_proj.weight has shape (32, 32), expected (16, 32)" in msg


def test_non_finite_and_non_numeric_tensors_are_named():
    state, config = _good()
    state["model.norm.weight"] = state["model.norm.weight"].copy()
    state["model.norm.weight"][3] = np.nan
    state["model.layers.0.input_layernorm.weight"] = np.array(["a"] * 32)
    with pytest.raises(StateDictError, match="model.norm.weight holds non-finite") as err:
        Model.from_hf(state, config)
    assert "model.layers.0.input_layernorm.weight holds <U1, not numbers" in str(err.value)


def test_untied_head_must_be_absent_or_equal_when_tied():
    hf = hf_llama("mha-tied")
    state, config = numpy_state_dict(hf), hf.config.to_dict()
    state["lm_head.weight"] = state["model.embed_tokens.weight"] + 1.0
    with pytest.raises(StateDictError, match="lm_head.weight: tie_word_embeddings is true"):
        Model.from_hf(state, config)


def test_untied_model_needs_its_head():
    state, config = _good()
    del state["lm_head.weight"]
    with pytest.raises(StateDictError, match=r"missing lm_head.weight \(96, 32\)"):
        Model.from_hf(state, config)


def test_the_input_state_dict_is_left_alone():
    state, config = _good()
    before = {k: v.copy() for k, v in state.items()}
    model = Model.from_hf(state, config, dtype=np.float64)
    model.logits([1, 2, 3])
    assert state.keys() == before.keys()
    assert all(np.array_equal(state[k], before[k]) for k in state)


@pytest.mark.parametrize("dtype", [np.int32, "float8", None, np.complex64])
def test_model_dtype_is_a_float_the_engine_computes_with(dtype):
    state, config = _good()
    with pytest.raises(ValueError, match="model dtype must be float32, float64, float16 or bfloat16, got"):
        Model.from_hf(state, config, dtype=dtype)


@pytest.mark.parametrize("change, words", [
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling of type 'llama3'"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_parameters of type 'yarn'"),
    ({"model_type": "mistral"}, "model_type 'mistral'"),
    ({"architectures": ["MistralForCausalLM"]}, "MistralForCausalLM"),
    ({"attention_bias": True}, "attention_bias=True"),
    ({"mlp_bias": True}, "mlp_bias=True"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ({"sliding_window": 4096}, "'sliding_window'"),
])
def test_unsupported_settings_are_refused_by_name(change, words):
    state, config = _good()
    config.update(change)
    with pytest.raises(UnsupportedConfig) as err:
        Model.from_hf(state, config)
    assert words in str(err.value)


# ---------------------------------------------------------------------- folders save_pretrained wrote


def test_load_reads_save_pretrained_single_file(tmp_path):
    hf = hf_llama("mha-tied")
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    model = Model.load(tmp_path, dtype=np.float64)
    ids = [5, 6, 7, 8, 70]
    assert_close_logits(model.logits(ids), hf_logits(hf, ids))


def test_load_reads_a_sharded_checkpoint(tmp_path):
    hf = hf_llama("gqa-untied")
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2        # really sharded
    assert not (tmp_path / "model.safetensors").exists()
    model = Model.load(tmp_path, dtype=np.float64)
    ids = [1, 2, 3, 90, 4]
    assert_close_logits(model.logits(ids), hf_logits(hf, ids))


def test_load_widens_bfloat16_exactly(tmp_path):
    hf = hf_llama("gqa-tied-headdim").to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    model = Model.load(tmp_path, dtype=np.float64)
    embed = hf.model.embed_tokens.weight.detach().double().numpy()
    assert np.array_equal(model.embed, embed)                # bf16 -> float32 -> float64 exactly
    from transformers import LlamaForCausalLM
    hf64 = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()   # fresh rotary tables
    assert_close_logits(model.logits([3, 2, 1]), hf_logits(hf64, [3, 2, 1]))


def test_load_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(CheckpointError, match="is not a folder"):
        Model.load(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="has no config.json"):
        Model.load(tmp_path)
    hf = hf_llama("mha-untied")
    hf.save_pretrained(tmp_path, max_shard_size="10KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    shards[-1].unlink()
    with pytest.raises(CheckpointError, match=f"names shard '{shards[-1].name}'"):
        Model.load(tmp_path)
    for p in tmp_path.glob("model*"):
        p.unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0")
    with pytest.raises(CheckpointError, match="only safetensors checkpoints are read"):
        Model.load(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot read"):
        Model.load(tmp_path)


def test_load_refuses_an_unsupported_config_before_reading_tensors(tmp_path):
    hf = hf_llama("mha-untied")
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"")           # never read: refused first
    with pytest.raises(UnsupportedConfig, match="'linear'"):
        Model.load(tmp_path)
