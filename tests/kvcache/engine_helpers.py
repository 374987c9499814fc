"""Shared by the engine tests: random Llama configs, the same weights in transformers and here.

The transformers side is the independent reference: its LlamaForCausalLM, its generate().  Its
weights are drawn by torch (not by the engine's Model.random) and handed to Model.from_hf.
"""
from __future__ import annotations

import numpy as np

# Four small models covering what the engine must get right: grouped-query and plain multi-head
# attention, tied and untied embeddings, two rope_theta values, a head_dim that is not D / H.
CONFIGS = {
    "gqa-untied": dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                       tie_word_embeddings=False, max_position_embeddings=128),
    "mha-tied": dict(vocab_size=80, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                     num_attention_heads=3, num_key_value_heads=3, rope_theta=500.0,
                     tie_word_embeddings=True, max_position_embeddings=128),
    "gqa-tied-headdim": dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=1, head_dim=12, rope_theta=500.0,
                             tie_word_embeddings=True, max_position_embeddings=128),
    "mha-untied": dict(vocab_size=72, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, rope_theta=10000.0,
                       tie_word_embeddings=False, max_position_embeddings=128, rms_norm_eps=1e-5),
}


def hf_llama(name: str, seed: int = 0, std: float = 0.25):
    """transformers' LlamaForCausalLM for CONFIGS[name], float64, eval mode, with random weights
    large enough that next-token distributions are peaked (the default init gives near-ties)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = dict(CONFIGS[name], bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**kwargs)).double().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, std)
    return model


def numpy_state_dict(hf_model) -> dict:
    """The model's tensors as numpy arrays, as save_pretrained would store them (no tied copy)."""
    state = {k: v.detach().numpy().copy() for k, v in hf_model.state_dict().items()}
    if hf_model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def engine_model(hf_model, dtype=np.float64):
    from kvcache.model import Model
    return Model.from_hf(numpy_state_dict(hf_model), hf_model.config.to_dict(), dtype=dtype)


def hf_generate(hf_model, prompt, **kwargs) -> list[int]:
    """transformers' generate() for one prompt: the new tokens, cut after the first EOS."""
    import torch
    eos = kwargs.get("eos_token_id")
    ids = torch.tensor([list(prompt)])
    with torch.inference_mode():
        # an explicit mask: without one, generate() takes every prompt token equal to the pad id
        # for padding and masks it out
        out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                pad_token_id=0 if eos is None else eos, **kwargs)
    new = out[0, len(prompt):].tolist()
    return new[: new.index(eos) + 1] if eos is not None and eos in new else new


def left_padded(prompts):
    """A batch of prompts as transformers takes it: (ids, attention_mask), each (B, T) torch.long,
    every prompt at the right end of its row, zeros (masked) on its left."""
    import torch
    T = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), T), dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.tensor(list(p))
        mask[i, T - len(p):] = 1
    return ids, mask


def hf_generate_batch(hf_model, prompts, **kwargs) -> list[list[int]]:
    """transformers' greedy generate() of a left-padded batch: each prompt's new tokens, cut after EOS."""
    import torch
    eos = kwargs.get("eos_token_id")
    ids, mask = left_padded(prompts)
    with torch.inference_mode():
        out = hf_model.generate(ids, attention_mask=mask, do_sample=False,
                                pad_token_id=0 if eos is None else eos, **kwargs)
    result = []
    for row in out[:, ids.shape[1]:].tolist():
        result.append(row[: row.index(eos) + 1] if eos is not None and eos in row else row)
    return result


def random_prompts(vocab: int, lengths, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=n) for n in lengths]


def random_state_dict(config: dict, seed: int = 0) -> dict:
    """transformers-named tensors of the right shapes for ``config``, drawn here (no torch)."""
    from kvcache.config import ModelConfig
    from kvcache.model import hf_parameter_shapes
    rng = np.random.default_rng(seed)
    shapes = hf_parameter_shapes(ModelConfig.from_dict(config))
    return {name: rng.normal(0.0, 0.3, size=shape) for name, shape in shapes.items()}
