"""lessons.precision: the formats' bits, the error measures, the bytes of a decode step, the
activations of a model, the plan; on small random models (the real model is the chapter's)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from kvcache.linear import linear
from kvcache.model import Model
from kvcache.norm import rms_norm
from lessons.machine_facts import MachineFacts
from lessons.precision import (activation_extremes, bit_fields, cache_bytes, decode_step_seconds,
                               format_bits, kl_divergence, perplexity, plan_precision, quality,
                               rms_norm_at, step_bytes, top1_agreement, weight_bytes)

CFG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
MIB = 2**20


@pytest.mark.parametrize("name, bits, exponent, mantissa, largest, smallest", [
    ("float32", 32, 8, 23, (2 - 2.0 ** -23) * 2.0 ** 127, 2.0 ** -126),
    ("bfloat16", 16, 8, 7, (2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -126),
    ("float16", 16, 5, 10, 65504.0, 2.0 ** -14),
])
def test_format_bits_are_the_standard_layouts(name, bits, exponent, mantissa, largest, smallest):
    f = format_bits(name)
    assert (f.bits, f.exponent_bits, f.mantissa_bits) == (bits, exponent, mantissa)
    assert 1 + f.exponent_bits + f.mantissa_bits == f.bits
    assert f.largest == largest and f.smallest_normal == smallest and f.step == 2.0 ** -mantissa


def test_bit_fields_spell_a_value():
    # -2.5 = -1.25 x 2^1: sign 1, exponent 1 + bias, mantissa .01
    assert bit_fields(-2.5, "float32") == ("1", "10000000", "01" + "0" * 21)
    assert bit_fields(-2.5, "bfloat16") == ("1", "10000000", "0100000")
    assert bit_fields(-2.5, "float16") == ("1", "10000", "0100000000")
    assert bit_fields(1e5, "float16") == ("0", "11111", "0" * 10)          # past 65504: infinity
    with pytest.raises(ValueError, match="format 'float8' is not one of"):
        format_bits("float8")


def test_measures_on_hand_computed_distributions():
    ref = np.log(np.array([[0.5, 0.5], [0.9, 0.1]]))
    other = np.log(np.array([[0.25, 0.75], [0.9, 0.1]]))
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    np.testing.assert_allclose(kl_divergence(ref, other), [expected, 0.0], atol=1e-12)
    assert top1_agreement(ref, other) == 0.5         # a tie goes to the first token
    V = 10
    assert perplexity(np.zeros((5, V)), [1, 2, 3, 4, 5]) == pytest.approx(V)   # uniform: V
    q = quality(ref, ref, [0, 1])
    assert q.kl_mean == 0 and q.top1 == 1.0


def test_bytes_of_a_decode_step_follow_the_config():
    for dtype, size in (("float32", 4), ("bfloat16", 2)):
        model = Model.random(CFG, seed=0, dtype=dtype)
        D, F, L, V = 32, 48, 2, 64
        qkv = (4 + 2 * 2) * 8 * D
        matrices = L * (qkv + D * 4 * 8 + 2 * F * D + D * F) * size
        norms = (2 * L + 1) * D * 4 if dtype == "bfloat16" else (2 * L + 1) * D * size
        head = V * D * size                                  # tied: the embedding table, read whole
        assert weight_bytes(model) == matrices + norms + head + D * size
        assert cache_bytes(model, 10) == 2 * L * 2 * 10 * 8 * size
        assert cache_bytes(model, 10, "int8") == 2 * L * 2 * 10 * (8 + 4)
        assert step_bytes(model, 10) == weight_bytes(model) + cache_bytes(model, 10)


def test_activation_extremes_run_the_model():
    model = Model.random(CFG, seed=3)
    ids = [1, 5, 9, 13, 2, 7]
    act = activation_extremes(model, ids)
    logits = linear(rms_norm(act.hidden, model.norm, model.config.rms_norm_eps), model.lm_head)
    np.testing.assert_allclose(logits, model.logits(ids), rtol=1e-5, atol=1e-5)
    assert act.residual >= np.abs(act.hidden).max() and 0 <= act.residual_layer < 2
    assert act.sum_of_squares == pytest.approx(float(np.square(act.row.astype(np.float64)).sum()))
    assert act.mlp_hidden > 0


def test_rms_norm_overflows_in_float16_only():
    row = np.full(576, 300.0, np.float32)                  # sum of squares 5.2e7, past 65504
    assert np.all(rms_norm_at(row, "float16") == 0)
    bf = rms_norm_at(row, "bfloat16")          # in range, but a sum of 576 terms at 8 bits drifts
    assert np.all(np.isfinite(bf)) and np.all(np.abs(bf - 1.0) < 0.5) and np.abs(bf - 1.0).max() > 2 ** -7
    np.testing.assert_allclose(rms_norm_at(row, "float32"), 1.0, rtol=1e-6)
    small = np.full(576, 3.0, np.float32)                  # sum of squares 5,184: in range
    assert np.all(np.isfinite(rms_norm_at(small, "float16"))) and np.all(rms_norm_at(small, "float16") > 0.5)


@pytest.mark.parametrize("free, expected", [
    (400 * MIB, ("float32",)), (1500 * MIB, ("float32", "bfloat16")),
    (64 * 2**30, ("float32", "bfloat16", "float16")), (None, ("float32", "bfloat16", "float16")),
])
def test_plan_loads_the_two_byte_models_only_where_memory_holds_them(free, expected):
    plan = plan_precision(MachineFacts(mem_available_bytes=free))
    assert plan.weight_dtypes == expected and plan.free_bytes == free


def test_decode_step_seconds_is_a_positive_time():
    model = Model.random(CFG, seed=1, dtype="bfloat16")
    assert decode_step_seconds(model, [1, 2, 3], 3) > 0
