"""The int4 and int2 caches: packing, the quantizer's bound, the bytes kept, greedy and beams on
both layouts, reorder/select/crop moving codes, scales and windows together, the CLI."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcache.__main__ import main
from kvcache.cache import contiguous_cache
from kvcache.layouts import new_cache
from kvcache.generate import beam_search, greedy
from kvcache.model import Model
from kvcache.paged import paged_cache
from kvcache.quantized import pack_codes, quantize_kv, dequantize_kv, unpack_codes
from kvcache.quantized_cache import GROUP

CONFIG = dict(vocab_size=96, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
              tie_word_embeddings=False, max_position_embeddings=256)
G, D = 2, 16                                    # kv heads, head_dim of CONFIG


@pytest.fixture(scope="module")
def model():
    return Model.random(CONFIG, seed=0)


def prompts(seed=0, lengths=(5, 40, 17)):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, CONFIG["vocab_size"], n).tolist() for n in lengths]


# ---------------------------------------------------------------------- packing and the quantizer


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([4, 2]), st.integers(1, 6), st.integers(0, 2**16))
def test_packing_round_trips_and_really_packs(bits, bytes_per_row, seed):
    d = bytes_per_row * 8 // bits
    codes = np.random.default_rng(seed).integers(0, 2 ** bits, (3, 5, d)).astype(np.uint8)
    packed = pack_codes(codes, bits)
    assert packed.dtype == np.uint8 and packed.shape == (3, 5, bytes_per_row)
    assert np.array_equal(unpack_codes(packed, bits), codes)


def test_packing_puts_the_first_code_in_the_low_bits():
    assert pack_codes(np.array([1, 2], np.uint8), 4).tolist() == [1 + 2 * 16]
    assert pack_codes(np.array([3, 0, 1, 2], np.uint8), 2).tolist() == [3 + 0 * 4 + 1 * 16 + 2 * 64]
    with pytest.raises(ValueError, match="whole bytes"):
        pack_codes(np.zeros(3, np.uint8), 4)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.sampled_from([0, 1]), st.integers(0, 2**16), st.floats(1e-3, 1e3))
def test_every_number_is_within_half_a_step(bits, axis, seed, spread):
    x = np.random.default_rng(seed).standard_normal((7, 5)) * spread
    codes, scale, offset = quantize_kv(x, bits, axis)
    assert codes.dtype == np.uint8 and codes.max() <= 2 ** bits - 1
    assert scale.shape == offset.shape == ((1, 5) if axis == 0 else (7, 1))
    back = dequantize_kv(codes, scale, offset)
    assert np.all(np.abs(back - x) <= scale / 2 * (1 + 1e-9) + 1e-12)


def test_a_constant_slice_is_kept_exactly():
    x = np.array([[2.5, 1.0], [2.5, 3.0]])
    codes, scale, offset = quantize_kv(x, 2, 0)
    assert scale[0, 0] == 0 and codes[:, 0].tolist() == [0, 0]
    assert np.array_equal(dequantize_kv(codes, scale, offset)[:, 0], [2.5, 2.5])


# ---------------------------------------------------------------------- the layer's storage


def written(seed, T, scale=1.0):
    """T positions of keys and values (T, G, D) written one prefill into a fresh int4 cache."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((T, G, D)) * scale, rng.standard_normal((T, G, D)) * scale


def fill(kv, keys, values, counts):
    plan = kv.reserve(counts)
    for layer in kv:
        layer.update(keys, values, plan)
    return plan


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
@pytest.mark.parametrize("bits", [4, 2])
def test_full_groups_are_per_channel_and_the_window_is_exact(layout, bits):
    """Keys of a full group are within half a step of their channel's range over the group;
    values within half a step of their row's range; the positions after the last full group
    come back exactly (the window)."""
    group = GROUP if layout == "contiguous" else 16
    T = 2 * group + 5
    keys, values = written(1, T)
    kv = new_cache(layout, n_layers=1, batch=1, kv_heads=G, head_dim=D, max_len=100, dtype=f"int{bits}")
    fill(kv, keys.astype(np.float32), values.astype(np.float32), [T])
    got_k, got_v = kv[0].keys(0).transpose(1, 0, 2), kv[0].values(0).transpose(1, 0, 2)   # (T, G, D)
    top = 2 ** bits - 1
    for first in range(0, 2 * group, group):
        part = keys[first: first + group].astype(np.float32)
        step = (part.max(axis=0) - part.min(axis=0)) / top                       # (G, D): per channel
        assert np.all(np.abs(got_k[first: first + group] - part) <= step / 2 * 1.001 + 1e-6)
    vstep = (values.max(axis=-1) - values.min(axis=-1)) / top                    # (T, G): per token
    assert np.all(np.abs(got_v[: 2 * group] - values[: 2 * group]) <= vstep[: 2 * group, :, None] / 2 * 1.001 + 1e-6)
    assert np.array_equal(got_k[2 * group:], keys[2 * group:].astype(np.float32))
    assert np.array_equal(got_v[2 * group:], values[2 * group:].astype(np.float32))
    assert not np.array_equal(got_k[:group], keys[:group].astype(np.float32))   # really quantized


def bytes_by_hand(t, bits, group, d=D, heads=G, itemsize=4):
    """What one layer keeps for one sequence of t positions: the formula of the format, redone."""
    full, rest = (t // group) * group, t % group
    key = full * d * bits / 8 + (full // group) * d * 8 + rest * d * itemsize
    value = full * d * bits / 8 + full * 8 + rest * d * itemsize
    return int(heads * (key + value))


@pytest.mark.parametrize("bits", [4, 2])
def test_the_bytes_kept_match_the_formula(bits):
    lengths = [3, GROUP, 2 * GROUP + 7]
    kv = new_cache("contiguous", n_layers=2, batch=3, kv_heads=G, head_dim=D, max_len=100, dtype=f"int{bits}")
    N = sum(lengths)
    keys, values = written(2, N)
    fill(kv, keys.astype(np.float32), values.astype(np.float32), lengths)
    assert kv.used_bytes == 2 * sum(bytes_by_hand(t, bits, GROUP) for t in lengths)
    # allocated: codes and per-token scales for 96 positions (3 groups), per-channel scales for 3
    # groups, a window of 32 positions, per sequence, head and layer; keys and values
    per_head = 2 * 96 * D * bits // 8 + 3 * D * 8 + 96 * 8 + 2 * GROUP * D * 4
    assert kv.nbytes == 2 * 3 * G * per_head
    paged = paged_cache(2, 3, G, D, 96, dtype=f"int{bits}")
    fill(paged, keys.astype(np.float32), values.astype(np.float32), lengths)
    assert paged.used_bytes == 2 * sum(bytes_by_hand(t, bits, 16) for t in lengths)


def test_int8_keeps_its_meaning_one_scale_per_row():
    kv = new_cache("contiguous", n_layers=1, batch=1, kv_heads=G, head_dim=D, max_len=10, dtype="int8")
    assert kv[0].k.dtype == np.int8 and kv[0].k_scale.shape == (1, G, 10)
    with pytest.raises(ValueError, match="groups of tokens"):
        contiguous_cache(1, 1, G, D, 10, dtype="int4")


# ---------------------------------------------------------------------- generation


@pytest.mark.parametrize("dtype", ["int4", "int2"])
def test_until_a_group_fills_the_cache_is_exact(model, dtype):
    """Every position waits in the window until its group fills: short prompts and few new
    tokens decode exactly as with a float32 cache, on both layouts."""
    short = prompts(3, (4, 7))
    want = greedy(model, short, 8, None, "contiguous", cache_dtype="float32")
    assert greedy(model, short, 8, None, "contiguous", cache_dtype=dtype) == want       # 15 < 32
    assert greedy(model, [p[:3] for p in short], 5, None, "paged", cache_dtype=dtype) == \
        greedy(model, [p[:3] for p in short], 5, None, "paged", cache_dtype="float32")  # 8 < 16


@pytest.mark.parametrize("cache", ["contiguous", "paged"])
@pytest.mark.parametrize("dtype", ["int4", "int2"])
def test_greedy_and_beams_run_and_say_their_bytes(model, cache, dtype):
    ps = prompts()
    trace, full = [], []
    out = greedy(model, ps, 40, None, cache, cache_dtype=dtype, trace=trace)
    greedy(model, ps, 40, None, cache, cache_dtype="float32", trace=full)
    assert [len(o) for o in out] == [40, 40, 40]
    assert trace[-1]["cache_used_bytes"] < full[-1]["cache_used_bytes"]
    beams = beam_search(model, ps[1], 3, 20, None, cache=cache, cache_dtype=dtype, num_return_sequences=3)
    assert len(beams) == 3 and all(len(b) == 20 for b in beams)


def test_int4_greedy_stays_close_to_float32(model):
    """Over 60 new tokens after a 40-token prompt, int4 picks float32's token at most steps."""
    ps = prompts(5, (40,))
    want = greedy(model, ps, 60, None, "contiguous", cache_dtype="float32")[0]
    got = greedy(model, ps, 60, None, "contiguous", cache_dtype="int4")[0]
    assert got[:10] == want[:10]


def test_contiguous_and_paged_agree_when_a_block_is_a_group(model):
    """A paged pool of 32-position blocks quantizes exactly the contiguous cache's groups: the
    same keys, values and tokens."""
    ps = prompts(7, (45, 33))
    assert greedy(model, ps, 30, None, "contiguous", cache_dtype="int4") == \
        greedy(model, ps, 30, None, "paged", cache_dtype="int4", block_size=GROUP)
    a = model.new_cache(2, 120, dtype="int2")
    b = model.new_cache(2, 120, kind="paged", dtype="int2", block_size=GROUP)
    for kv in (a, b):
        model.prefill(ps, kv)
    for row in range(2):
        assert np.array_equal(a[1].keys(row), b[1].keys(row))
        assert np.array_equal(a[1].values(row), b[1].values(row))


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_reorder_and_select_move_codes_scales_and_window_together(model, layout):
    kv = model.new_cache(3, 120, kind=layout, dtype="int4", capacity=4)
    model.prefill(prompts(8, (45, 20, 38)), kv)
    before = [(kv[0].keys(r), kv[0].values(r)) for r in range(3)]
    kv.reorder([2, 0, 2, 1])
    for row, parent in enumerate([2, 0, 2, 1]):
        assert np.array_equal(kv[0].keys(row), before[parent][0])
        assert np.array_equal(kv[0].values(row), before[parent][1])
    model.decode([1, 2, 3, 4], kv)                       # a write to one copy leaves the other alone
    assert np.array_equal(kv[0].keys(0)[:, :38], before[2][0]) and kv.lengths.tolist() == [39, 46, 39, 21]
    kv.select([3, 1])
    assert np.array_equal(kv[0].keys(0)[:, :20], before[1][0])
    assert np.array_equal(kv[0].keys(1)[:, :45], before[0][0])


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_a_crop_into_a_quantized_group_keeps_what_the_codes_say(model, layout):
    kv = model.new_cache(1, 120, kind=layout, dtype="int4")
    model.prefill(prompts(9, (70,)), kv)
    keys = kv[1].keys(0)
    kv.crop(40)
    assert np.array_equal(kv[1].keys(0), keys[:, :40])
    model.decode([5], kv)
    assert np.array_equal(kv[1].keys(0)[:, :40], keys[:, :40]) and kv.lengths.tolist() == [41]


# ---------------------------------------------------------------------- the command line


@pytest.mark.parametrize("dtype", ["int4", "int2"])
def test_cli_takes_int4_and_int2_and_prints_the_bytes_kept(capsys, dtype):
    argv = ["generate", "--random", "--vocab-size", "50", "--hidden-size", "64", "--layers", "2", "--heads", "4",
            "--kv-heads", "2", "--intermediate-size", "40", "--prompt-ids", *map(str, range(1, 41)),
            "--max-new-tokens", "5", "--cache-dtype", dtype, "--json"]
    assert main(argv) == 0
    import json
    result = json.loads(capsys.readouterr().out)
    bits = int(dtype[3:])
    assert result["cache_dtype"] == dtype
    # the last new token is never fed back: 40 + 4 positions cached, in 2 layers
    assert result["cache_used_bytes"] == 2 * bytes_by_hand(44, bits, GROUP)
    # allocated for L_max = 45: one group of codes and scales, and a window, per head and layer
    per_head = 2 * 32 * D * bits // 8 + D * 8 + 32 * 8 + 2 * GROUP * D * 4
    assert result["cache_bytes"] == 2 * G * per_head


@pytest.mark.parametrize("layout", ["window", "h2o"])
def test_evicting_layouts_refuse_grouped_formats_clearly(model, layout):
    options = {"window": 8, "sinks": 2} if layout == "window" else {"budget": 8, "recent": 4}
    with pytest.raises(ValueError, match="groups of tokens"):
        model.new_cache(1, 64, kind=layout, dtype="int4", **options)


def test_serving_shares_quantized_prefix_blocks_and_preempts(model):
    """Full blocks are quantized once and never written again: a request served from another's
    cached prefix blocks, or recomputed after preemption, decodes as if served alone."""
    from kvcache.serving import Request, serve
    rng = np.random.default_rng(11)
    shared = rng.integers(0, CONFIG["vocab_size"], 40).tolist()
    prompts_ = [shared + rng.integers(0, CONFIG["vocab_size"], n).tolist() for n in (3, 9, 17, 1)]
    alone = greedy(model, prompts_, 20, None, "paged", cache_dtype="int4")
    preempted = {}
    for sharing in (False, True):
        result = serve(model, [Request(p, 20, None) for p in prompts_], block_size=16, num_blocks=12,
                       prefix_sharing=sharing, cache_dtype="int4", preempt=True)
        assert result.outputs == alone
        preempted[sharing] = len(result.preempted_requests)
    assert preempted[False] > 0                      # 12 blocks cannot hold the four at once
    assert result.prefix.blocks_hit > 0
