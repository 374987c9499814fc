"""The engine's fast paths give the numbers of their definitions, in the model's dtype, and load
each weight with one copy: matrices stored transposed, float32 kept float32 (no float64 scale
or tensor sneaking in), a loader's state dict emptied as the model fills."""
from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import kvcache.gqa as gqa
from engine_helpers import CONFIGS
from kvcache.linear import linear, stored_transposed
from kvcache.model import Model, StateDictError, random_state_dict
from kvcache.norm import rms_norm, silu
from kvcache.rope import apply_rope, rope_cos_sin

CONFIG = CONFIGS["gqa-untied"]
TIED = CONFIGS["mha-tied"]


def transposed_copy(w: np.ndarray) -> np.ndarray:
    """w's values, stored as the (out, in) view of a C-contiguous (in, out) buffer."""
    return np.ascontiguousarray(w.T).T


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 40), st.integers(1, 70), st.integers(1, 9))
def test_linear_on_weights_stored_transposed(seed, rows, out, width):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((rows, width)), rng.standard_normal((out, width))
    wt = transposed_copy(w)
    assert stored_transposed(wt) == (out > 1 and width > 1)      # a single row or column is both layouts
    want = np.einsum("ni,oi->no", x, w)
    np.testing.assert_allclose(linear(x, wt), want, rtol=1e-12, atol=1e-12)
    got32 = linear(x.astype(np.float32), wt.astype(np.float32, order="K"))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-4, atol=1e-4)


def test_every_matrix_is_stored_transposed_with_its_own_memory():
    state = random_state_dict(CONFIG, seed=3)
    before = {k: v.copy() for k, v in state.items()}
    model = Model.from_hf(state, CONFIG)
    p = "model.layers.1."
    w = model.layers[1]
    for got, parts in ((w.wqkv, ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]),
                       (w.wo, ["self_attn.o_proj"]), (w.w_gate_up, ["mlp.gate_proj", "mlp.up_proj"]),
                       (w.w_down, ["mlp.down_proj"])):
        assert stored_transposed(got) and got.dtype == np.float32
        np.testing.assert_array_equal(got, np.concatenate([state[p + n + ".weight"] for n in parts]))
        assert not any(np.shares_memory(got, state[p + n + ".weight"]) for n in parts)
    assert stored_transposed(model.embed) and stored_transposed(model.lm_head)
    np.testing.assert_array_equal(model.lm_head, state["lm_head.weight"])
    assert all(np.array_equal(state[k], before[k]) for k in before) and state.keys() == before.keys()


def test_consume_empties_the_dict_and_builds_the_same_model():
    kept = Model.from_hf(random_state_dict(TIED, seed=4), TIED, dtype=np.float64)
    state = random_state_dict(TIED, seed=4)
    state["lm_head.weight"] = state["model.embed_tokens.weight"].copy()     # the tied copy, as torch has it
    model = Model.from_hf(state, TIED, dtype=np.float64, consume=True)
    assert state == {}
    assert model.lm_head is model.embed and model.embed.dtype == np.float64
    ids = [1, 5, 9, 2]
    np.testing.assert_array_equal(model.logits(ids), kept.logits(ids))


def test_a_refused_dict_is_not_consumed():
    state = random_state_dict(CONFIG, seed=5)
    state["model.layers.0.mlp.up_proj.weight"] = np.zeros((3, 3))
    names = set(state)
    with pytest.raises(StateDictError, match=r"model.layers.0.mlp.up_proj.weight has shape \(3, 3\)"):
        Model.from_hf(state, CONFIG, consume=True)
    assert set(state) == names


def _peak_bytes_of_from_hf(config, consume: bool) -> tuple[int, int]:
    """(peak bytes allocated while building the model beyond what was held before, model bytes)."""
    tracemalloc.start()                       # before the dict: its tensors' frees are seen too
    try:
        state = random_state_dict(config, seed=6)
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        model = Model.from_hf(state, config, consume=consume)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    weights = {id(a): a.nbytes for a in [model.embed, model.norm, model.lm_head]}
    for w in model.layers:
        weights.update({id(a): a.nbytes for a in (w.attn_norm, w.wqkv, w.wo, w.mlp_norm, w.w_gate_up, w.w_down)})
    return peak, sum(weights.values())


def test_loading_holds_one_copy_of_the_weights_at_a_time():
    """Building from a dict it may consume, the model never holds more than a tensor or two
    beyond the dict's weights (each source is freed once copied); from a dict it must leave
    alone, the model is a whole second copy (the control: the measure sees copies)."""
    config = dict(CONFIG, num_hidden_layers=8, hidden_size=64, intermediate_size=160, vocab_size=512)
    peak, weights = _peak_bytes_of_from_hf(config, consume=True)
    largest = 512 * 64 * 4                                        # the embedding table, float32
    assert peak <= 1.5 * largest < 0.5 * weights
    peak, weights = _peak_bytes_of_from_hf(config, consume=False)
    assert peak >= weights


def test_torch_tensors_are_read_in_their_own_dtype():
    from kvcache.model import _to_numpy

    t = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 3
    a = _to_numpy(t)
    assert a.dtype == np.float32 and np.shares_memory(a, t.numpy())      # no float64 detour, no copy
    b = _to_numpy(torch.tensor([1.5, -2.0, 3.0e38], dtype=torch.bfloat16))
    assert b.dtype == np.float32
    np.testing.assert_array_equal(b, torch.tensor([1.5, -2.0, 3.0e38], dtype=torch.bfloat16).float().numpy())


def test_prefill_attention_stays_in_float32(monkeypatch):
    """The scores, their softmax and the weighted sum of a float32 prefill are float32 (a float64
    scale once made them float64), and equal the float64 computation to float32 precision."""
    seen = []
    monkeypatch.setattr(gqa, "softmax_inplace", lambda s, f=gqa.softmax_inplace: seen.append(s.dtype) or f(s))
    rng = np.random.default_rng(7)
    T, H, G, d = gqa.QUERY_BLOCK + 88, 6, 2, 16                   # two query blocks
    q, k, v = rng.standard_normal((T, H, d)), rng.standard_normal((T, G, d)), rng.standard_normal((T, G, d))
    want = gqa.causal_attention(q, k, v)
    assert seen == [np.float64, np.float64]                       # float64 in, float64 throughout
    seen.clear()
    got = gqa.causal_attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    assert got.dtype == np.float32 and seen == [np.float32, np.float32]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_per_token_pieces_keep_float32_and_silu_its_limits_without_warnings():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 2, 8)).astype(np.float32)
    cos, sin = rope_cos_sin(np.arange(5), 8, 100.0, np.float32)
    assert apply_rope(x, cos, sin).dtype == np.float32
    assert rms_norm(x[:, 0], np.ones(8, np.float32), 1e-5).dtype == np.float32
    z = np.array([-1e4, -100.0, -3.0, 0.0, 2.0, 100.0, 1e4], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                            # an overflow warning would fail here
        got = silu(z)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [0.0, 0.0, -3 / (1 + np.exp(3)), 0.0, 2 / (1 + np.exp(-2)), 100.0, 1e4],
                               rtol=1e-6, atol=1e-30)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([np.float32, np.float64, np.float16]), st.integers(1, 700))
def test_rms_norm_of_one_row_is_the_rows_of_many_bit_for_bit(seed, dtype, width):
    """The one-row path (a scalar root mean square) gives what the (N, D) path gives that row."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(1e-3, 1.0 if dtype == np.float16 else 1e2)      # float16: no overflowing sum
    x = (rng.standard_normal((3, width)) * scale).astype(dtype)
    w = rng.standard_normal(width).astype(dtype)
    many = rms_norm(x, w, 1e-5)
    for i in range(3):
        one = rms_norm(x[i:i + 1], w, 1e-5)
        assert one.dtype == dtype and one.shape == (1, width)
        np.testing.assert_array_equal(one, many[i:i + 1])
        np.testing.assert_array_equal(rms_norm(x[i], w, 1e-5), many[i])        # a 1-d row too


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 9), st.integers(1, 5), st.sampled_from([2, 8, 64]),
       st.sampled_from([np.float32, np.float64]))
def test_rope_with_full_width_tables_is_the_half_width_rotation_bit_for_bit(seed, n, heads, d, dtype):
    from kvcache.rope import full_width

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, heads, d)).astype(dtype)
    cos, sin = rope_cos_sin(rng.integers(0, 4096, n), d, 10000.0, dtype)
    got = apply_rope(x, *full_width(cos, sin))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, apply_rope(x, cos, sin))


def test_model_rope_tables_full_width_for_few_tokens_half_for_many():
    """The model looks positions up at full width for a decode step's few tokens and at half
    width for a prompt's many; both rotate a head the same way."""
    from kvcache.model import ROPE_FULL_WIDTH

    model = Model.random(CONFIG, seed=1)
    d = model.config.head_dim
    few = np.arange(3) + 5
    many = np.arange(ROPE_FULL_WIDTH + 1)
    assert all(t.shape == (3, d) for t in model._rope(few))
    assert all(t.shape == (len(many), d // 2) for t in model._rope(many))
    x = np.random.default_rng(2).standard_normal((len(many), 2, d)).astype(np.float32)
    np.testing.assert_array_equal(apply_rope(x[:3], *model._rope(many[:3])), apply_rope(x, *model._rope(many))[:3])


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_decode_of_one_sequence_writes_the_cache_as_a_batch_does(dtype):
    """A batch of one writes its key and value with a plain index: the same cache as one row of
    a batch of two fed the same step, in every storage format (int8's scales too)."""
    from kvcache.cache import ContiguousLayerCache

    rng = np.random.default_rng(4)
    one, two = ContiguousLayerCache(1, 2, 8, 6, dtype), ContiguousLayerCache(2, 2, 8, 6, dtype)
    for step in range(4):
        k, v = rng.standard_normal((2, 2, 2, 8)).astype(np.float32)
        one.update(k[:1], v[:1], one.reserve([1]))
        two.update(k, v, two.reserve([1, 1]))
        assert one.lengths.tolist() == [step + 1]
        np.testing.assert_array_equal(one.keys(0), two.keys(0))
        np.testing.assert_array_equal(one.values(0), two.values(0))
