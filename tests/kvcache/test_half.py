"""Two-byte floats (kvcache.half) and the engine at float16 and bfloat16: storage, widening, the
product's rounding, loading that keeps a checkpoint's bits, the cache format, the command line.

The expected values are computed here another way: bfloat16 values from their bit patterns
(sign, exponent, mantissa) or with torch's own bfloat16, products in float64.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import gguf

from kvcache.__main__ import main
from kvcache.cache import ContiguousLayerCache
from kvcache.cache_dtypes import cache_dtype
from kvcache.gguf_file import read_model
from kvcache.half import BLOCK_FLOATS, HALF_DTYPES, bfloat16, half_linear, is_half, round_to, widen
from kvcache.model import Model
from test_gguf_file import write_tiny_gguf

SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
ALL_WORDS = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16)


def bf16_value(word: int) -> float:
    """The number a bfloat16 bit pattern stands for, from its fields (1 sign, 8 exponent, 7
    mantissa bits; exponent bias 127)."""
    sign = -1.0 if word >> 15 else 1.0
    exponent, mantissa = (word >> 7) & 0xFF, word & 0x7F
    if exponent == 0:
        return sign * mantissa / 2 ** 7 * 2.0 ** -126
    return sign * (1 + mantissa / 2 ** 7) * 2.0 ** (exponent - 127)


def finite(words: np.ndarray, dtype) -> np.ndarray:
    """The bit patterns of finite values (exponent bits not all ones)."""
    exponent_mask = {np.dtype(np.float16): 0x7C00, bfloat16: 0x7F80}[np.dtype(dtype)]
    return words[(words & exponent_mask) != exponent_mask]


# ---------------------------------------------------------------------- the formats


def test_bfloat16_widening_is_the_bit_pattern_read_as_a_number():
    words = finite(ALL_WORDS, bfloat16)
    got = widen(words.view(bfloat16)).astype(np.float64)
    sample = words[:: 97]
    np.testing.assert_array_equal(got[:: 97], [bf16_value(int(w)) for w in sample])
    np.testing.assert_array_equal(got, torch.from_numpy(words.astype(np.int16)).view(torch.bfloat16).double().numpy())


def test_float16_widening_is_exact_for_every_finite_value():
    words = finite(ALL_WORDS, np.float16)
    h = words.view(np.float16)
    np.testing.assert_array_equal(widen(h), torch.from_numpy(words.astype(np.int16)).view(torch.float16).float().numpy())


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_rounding_is_to_nearest_as_torch_rounds(name):
    x = np.random.default_rng(0).standard_normal(20_000).astype(np.float32) * 100
    torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    np.testing.assert_array_equal(round_to(x, HALF_DTYPES[name]), torch.from_numpy(x).to(torch_dtype).float().numpy())


def test_is_half_names_the_two_byte_floats_only():
    assert is_half("bfloat16") and is_half(np.float16) and is_half(bfloat16)
    assert not is_half(np.float32) and not is_half("int16") and not is_half("no such dtype")


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows, out", [(1, 70), (3, 70), (40, 301), (2, BLOCK_FLOATS // 48 + 5)])
def test_half_linear_accumulates_in_float32_and_rounds_once(name, rows, out):
    """Against the float64 product of the same 2-byte weights: at most half a step of the 2-byte
    format from it (the one final rounding; float32 accumulation adds about 2**-24 relative, far
    below bfloat16's 2**-8 or float16's 2**-11) and always a representable 2-byte value.  A
    product in the 2-byte format itself would round at every one of the 48 additions."""
    dt = HALF_DTYPES[name]
    rng = np.random.default_rng(rows)
    w = rng.standard_normal((out, 48)).astype(dt)
    x = rng.standard_normal((rows, 48)).astype(np.float32)
    y = half_linear(x, w)
    exact = x.astype(np.float64) @ widen(w).astype(np.float64).T
    assert y.shape == (rows, out) and y.dtype == np.float32
    np.testing.assert_array_equal(round_to(y, dt), y)
    step = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}[name]
    smallest_normal = {"bfloat16": 2.0 ** -126, "float16": 2.0 ** -14}[name]
    ulp = step * 2.0 ** np.floor(np.log2(np.maximum(np.abs(exact), smallest_normal)))
    # float32's own rounding of 48 products and sums: at most 48 * 2**-24 of sum |x_i w_i|
    accumulation = 48 * 2.0 ** -24 * (np.abs(x).astype(np.float64) @ np.abs(widen(w)).astype(np.float64).T)
    assert np.all(np.abs(y - exact) <= 0.5 * ulp + accumulation)


# ---------------------------------------------------------------------- the model at 2 bytes


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_random_model_stores_weights_at_two_bytes_and_computes_in_float32(name):
    model = Model.random(SMALL, seed=1, dtype=name)
    ref = Model.random(SMALL, seed=1, dtype=np.float64)
    assert model.dtype == HALF_DTYPES[name] and model.compute_dtype == np.float32
    for w in model.layers:
        assert {w.wqkv.dtype, w.wo.dtype, w.w_gate_up.dtype, w.w_down.dtype} == {HALF_DTYPES[name]}
        assert w.attn_norm.dtype == np.float32
    np.testing.assert_array_equal(widen(model.layers[0].wqkv), round_to(ref.layers[0].wqkv.astype(np.float32),
                                                                        HALF_DTYPES[name]))
    logits = model.logits([1, 2, 3, 4, 5])
    assert logits.dtype == np.float32
    np.testing.assert_array_equal(round_to(logits, HALF_DTYPES[name]), logits)    # rounded like torch's


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_cached_decode_follows_the_model_and_its_cache_is_two_bytes(name):
    model = Model.random(SMALL, seed=2, dtype=name)
    cache = model.new_cache(2, 16)
    assert cache.dtype == name
    layer = next(iter(cache))
    assert layer.k.dtype == HALF_DTYPES[name] and layer.k.itemsize == 2
    prompts = [[5, 6, 7, 8], [9, 10]]
    model.prefill(prompts, cache)
    step = model.decode([11, 12], cache)
    full = np.stack([model.next_logits(prompts[0] + [11]), model.next_logits(prompts[1] + [12])])
    # the cached path reads keys and values rounded to the cache's format; the reference keeps
    # them float32: they differ by that rounding, a few steps of the format in the logits
    step_size = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}[name]
    assert np.abs(step - full).max() <= 50 * step_size * np.abs(full).max()
    assert (step.argmax(1) == full.argmax(1)).all()


def test_unknown_dtypes_are_refused_by_name():
    with pytest.raises(ValueError, match="model dtype must be float32, float64, float16 or bfloat16, got 'float8'"):
        Model.random(SMALL, dtype="float8")
    with pytest.raises(ValueError, match="cache dtype 'float8' is not one of float64, float32, float16, bfloat16, int8"):
        ContiguousLayerCache(1, 2, 8, 4, dtype="float8")


def test_bfloat16_cache_rows_are_within_half_a_step():
    x = np.random.default_rng(3).standard_normal((4, 2, 64)).astype(np.float32)
    fmt = cache_dtype("bfloat16")
    data, scale = fmt.encode(x)
    assert scale is None and data.dtype == bfloat16 and fmt.bytes_per_row(64) == 128
    back = fmt.decode(data, None, np.float32)
    assert back.dtype == np.float32
    assert np.all(np.abs(back - x) <= 2.0 ** -8 * np.abs(x))


def test_bfloat16_checkpoint_loaded_in_bfloat16_keeps_its_bits(tmp_path):
    from engine_helpers import hf_llama

    hf = hf_llama("gqa-untied").to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    model = Model.load(tmp_path, dtype="bfloat16")

    def bits(t):
        return t.detach().view(torch.int16).numpy().view(np.uint16)

    assert model.embed.dtype == bfloat16 and model.lm_head.dtype == bfloat16
    np.testing.assert_array_equal(model.embed.view(np.uint16), bits(hf.model.embed_tokens.weight))
    np.testing.assert_array_equal(model.lm_head.view(np.uint16), bits(hf.lm_head.weight))
    attn = hf.model.layers[1].self_attn
    qkv = np.concatenate([bits(attn.q_proj.weight), bits(attn.k_proj.weight), bits(attn.v_proj.weight)])
    np.testing.assert_array_equal(model.layers[1].wqkv.view(np.uint16), qkv)
    np.testing.assert_array_equal(model.layers[1].w_down.view(np.uint16), bits(hf.model.layers[1].mlp.down_proj.weight))
    matrices = [model.embed, model.lm_head] + [getattr(w, n) for w in model.layers
                                               for n in ("wqkv", "wo", "w_gate_up", "w_down")]
    assert all(m.dtype == bfloat16 for m in matrices)            # no float32 copy of any of them
    np.testing.assert_array_equal(model.layers[0].attn_norm,
                                  hf.model.layers[0].input_layernorm.weight.detach().float().numpy())
    assert Model.load(tmp_path).layers[1].wqkv.dtype == np.float32    # the default still widens


def test_gguf_two_byte_tensors_keep_their_bits_and_the_rest_round(tmp_path):
    path = tmp_path / "tiny.gguf"
    held = write_tiny_gguf(path)               # lm_head is BF16; the layers mix every type
    reader = gguf.GGUFReader(str(path))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    raw = {t.name: np.asarray(t.data) for t in reader.tensors}
    _, bf = read_model(path, bfloat16)
    assert all(a.dtype == bfloat16 for a in bf.values())
    np.testing.assert_array_equal(bf["lm_head.weight"].view(np.uint16), raw["output.weight"].view(np.uint16)
                                  .reshape(bf["lm_head.weight"].shape))
    for name, values in held.items():     # every tensor, whatever its type, is the file's number rounded
        np.testing.assert_array_equal(widen(bf[name]), round_to(values, bfloat16), err_msg=name)
    _, h = read_model(path, np.float16)
    f16 = [n for n, t in types.items() if t == "F16" and "attn_q" not in n and "attn_k" not in n]
    assert f16
    hf_name = {"blk.0.attn_output.weight": "model.layers.0.self_attn.o_proj.weight"}
    for name in f16:
        if name in hf_name:
            np.testing.assert_array_equal(h[hf_name[name]].view(np.uint16),
                                          raw[name].view(np.uint16).reshape(h[hf_name[name]].shape))
    model = Model.load(path, dtype="bfloat16")
    assert model.layers[0].wqkv.dtype == bfloat16


def test_cli_dtype_bfloat16_runs_and_reports_its_cache(capsys):
    code = main(["generate", "--random", "--vocab-size", "50", "--hidden-size", "32", "--layers", "2",
                 "--heads", "4", "--kv-heads", "2", "--intermediate-size", "40", "--dtype", "bfloat16",
                 "--prompt-ids", "1", "2", "3", "--max-new-tokens", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    model = Model.random(dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, intermediate_size=40, max_position_embeddings=4096),
                         dtype="bfloat16")
    from kvcache.generate import greedy
    expected = greedy(model, [[1, 2, 3]], 4)
    assert f"prompt 0: 4 new tokens: {' '.join(map(str, expected[0]))}" in out
    # 1 sequence, L_max = 3 + 4, 2 layers, 2 kv heads of 8, keys and values, 2 bytes
    assert f"cache: {1 * 7 * 2 * 2 * 8 * 2 * 2:,} bytes allocated" in out and "bfloat16" in out
    with pytest.raises(SystemExit):
        main(["generate", "--random", "--dtype", "float8", "--prompt-ids", "1"])
    assert "invalid choice: 'float8'" in capsys.readouterr().err


def test_greedy_and_beam_search_take_a_bfloat16_cache_in_either_layout():
    from kvcache.generate import beam_search, greedy

    model = Model.random(SMALL, seed=4)                        # float32 weights, bfloat16 cache
    prompts = [[1, 2, 3, 4], [5, 6]]
    contiguous = greedy(model, prompts, 6, cache_dtype="bfloat16")
    assert contiguous == greedy(model, prompts, 6, cache="paged", cache_dtype="bfloat16", block_size=4)
    assert [len(o) for o in contiguous] == [6, 6]
    beams = beam_search(model, prompts[0], 3, 5, cache_dtype="bfloat16")
    assert beams == beam_search(model, prompts[0], 3, 5, cache="paged", cache_dtype="bfloat16", block_size=4)
    kv = model.new_cache(1, 8, dtype="bfloat16")
    model.prefill([prompts[0]], kv)
    layer = next(iter(kv))
    assert layer.k.dtype == bfloat16                            # stored at 2 bytes
    kv32 = model.new_cache(1, 8)
    model.prefill([prompts[0]], kv32)
    layer32 = next(iter(kv32))        # layer 0's keys do not depend on the cache: the same, rounded
    np.testing.assert_array_equal(widen(layer.k[0, :, :4]), round_to(layer32.k[0, :, :4], bfloat16))


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_astype_is_loading_at_that_dtype(name, tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tied=True)
    converted = Model.load(path).astype(name)
    loaded = Model.load(path, dtype=name)
    assert converted.lm_head is converted.embed                     # still tied: one table
    for a, b in [(converted.embed, loaded.embed), (converted.norm, loaded.norm)] + [
            (getattr(x, f), getattr(y, f)) for x, y in zip(converted.layers, loaded.layers)
            for f in ("attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down")]:
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))   # bits, any layout
    np.testing.assert_array_equal(converted.logits([1, 2, 3]), loaded.logits([1, 2, 3]))
