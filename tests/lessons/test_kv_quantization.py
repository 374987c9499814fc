"""Chapter 13's machinery: RoPE undone exactly, the fake quantizer's half-step bound in both
layouts, the bytes a configuration keeps, and the mask that says which keys a query reads
quantized (a decoding cache's, with and without the window and the sink)."""
from fractions import Fraction

import numpy as np
import pytest

from lessons.harness import kept_bytes_per_token
from kvcache.model import Model
from lessons.kv_quantization import (GROUP, Config, QuantizedAttention, fake_quantize, first_within,
                                     kept_parts, pairs_won, quantized_logits, rotate, unrotate)


def test_unrotate_undoes_rope():
    keys = np.random.default_rng(0).standard_normal((2, 50, 8))
    assert np.allclose(rotate(unrotate(keys, 10_000.0), 10_000.0), keys, atol=1e-12)
    assert np.allclose(unrotate(keys, 10_000.0)[:, 0], keys[:, 0])          # position 0 is not turned


@pytest.mark.parametrize("per", ["token", "channel"])
def test_fake_quantize_is_within_half_a_step(per):
    x = np.random.default_rng(1).standard_normal((2, 70, 8)) * 3
    back = fake_quantize(x, 3, per)
    for h in range(2):
        if per == "token":
            step = (x[h].max(axis=1) - x[h].min(axis=1))[:, None] / 7
            assert np.all(np.abs(back[h] - x[h]) <= step / 2 + 1e-12)
        else:
            for start in range(0, 70, GROUP):
                part = x[h, start: start + GROUP]
                step = (part.max(axis=0) - part.min(axis=0)) / 7
                assert np.all(np.abs(back[h, start: start + GROUP] - part) <= step / 2 + 1e-12)


@pytest.mark.parametrize("T", [5, 32, 70])
def test_fake_quantize_is_the_exercise_quantizer_slice_by_slice(T):
    from kvcache.quantized import dequantize_kv, quantize_kv
    x = np.random.default_rng(5).standard_normal((3, T, 8))
    for h in range(3):
        assert np.array_equal(fake_quantize(x, 2, "token")[h], dequantize_kv(*quantize_kv(x[h], 2, 1)))
        for start in range(0, T, GROUP):
            part = x[h, start: start + GROUP]
            assert np.array_equal(fake_quantize(x, 2, "channel")[h, start: start + GROUP],
                                  dequantize_kv(*quantize_kv(part, 2, 0)))


def test_the_bytes_a_configuration_keeps():
    # SmolLM2: 3 heads of 64; 4 bits per channel: 2 x 192 x 4/8 codes + 8 x 3 + 8 x 3 x 64 / 32
    assert kept_bytes_per_token(30, kept_parts(Config(4), 3, 64)) == 30 * (192 + 24 + 48)
    assert kept_bytes_per_token(30, kept_parts(Config(2, "token"), 3, 64)) == 30 * (96 + 24 + 24)
    assert kept_bytes_per_token(1, kept_parts(Config(3), 1, 5)) == Fraction(2 * 5 * 3, 8) + 8 + Fraction(8 * 5, 32)


def test_the_mask_reads_keys_as_decoding_would():
    def mask(config):
        return QuantizedAttention(1, 4, 70, config, 10_000.0).quantized_mask(70)
    m = mask(Config(2))                                      # window and sink
    assert not m[30, :31].any()                              # at t = 30 the first group is still filling
    assert m[31, 1:32].all() and not m[31, 0]                # at t = 31 it is full; the sink stays
    assert not m[40, 32:41].any() and m[64, 1:64].all()
    bare = mask(Config(2, window=False, sink=False))
    assert bare.all()
    assert not mask(Config(2, window=False))[:, 0].any() and mask(Config(2, window=False))[:, 1:].all()


def test_first_within_takes_the_fewest_bytes_close_enough():
    class J:
        def __init__(self, b, p, kl=0.0):
            self.bytes_per_token, self.perplexity, self.kl_mean = b, p, kl
    judged = [J(100, 10.05), J(50, 10.2), J(70, 10.09)]
    assert first_within(judged, 10.0).bytes_per_token == 70
    assert first_within(judged, 9.0) is None
    assert first_within([J(70, 9.5)], 10.0).perplexity == 9.5             # below the reference: nothing lost
    tied = [J(70, 10.05, kl=0.02), J(70, 10.08, kl=0.01), J(90, 10.0)]
    assert first_within(tied, 10.0).kl_mean == 0.01                       # same bytes: the lower KL


def _model():
    return Model.random(dict(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128), seed=7)


def test_several_configurations_in_one_pass_give_each_its_own_logits():
    model = _model()
    ids = np.random.default_rng(2).integers(0, 40, 70)          # three groups of 32 begun
    configs = [Config(2), Config(3, "token", window=False, sink=False), Config(2, pre_rope=True, window=False),
               Config(8, sink=False)]
    together = quantized_logits(model, ids, configs)
    assert together.shape == (4, 70, 40)
    for config, logits in zip(configs, together):
        assert np.allclose(logits, quantized_logits(model, ids, config), rtol=1e-5, atol=1e-5)
    assert not np.allclose(together[0], together[1], atol=1e-3)           # the rows did read different caches


def test_a_quantized_pass_reads_what_a_decoding_cache_would():
    # 8 bits with the window: before position 31 no key is quantized, so the logits are float32's
    model = _model()
    ids = np.random.default_rng(3).integers(0, 40, 40)
    reference = model.logits(ids)
    logits = quantized_logits(model, ids, Config(8))
    assert np.allclose(logits[:30], reference[:30], rtol=1e-4, atol=1e-4)
    assert not np.allclose(logits[31:], reference[31:], rtol=1e-6, atol=1e-6)


def test_quantized_attention_takes_configs_only():
    with pytest.raises(ValueError, match="Config"):
        QuantizedAttention(1, 4, 10, [], 10_000.0)
    with pytest.raises(ValueError, match="Config"):
        QuantizedAttention(1, 4, 10, ["2 bits"], 10_000.0)
    assert QuantizedAttention(1, 4, 10, [Config(2), Config(4)], 10_000.0).batch == 2


def test_short_names_and_pairs_won():
    assert Config(4, pre_rope=True).key == "4cbw" and Config(2, "token", window=False, sink=False).key == "2tan"
    assert Config(3, sink=False).key == "3car" and Config(8, window=False).key == "8cas"

    class J:
        def __init__(self, kl):
            self.kl_mean = kl
    configs = [Config(4, per) for per in ("token", "channel")] + [Config(2, per) for per in ("token", "channel")]
    judged = [J(0.2), J(0.1), J(0.5), J(0.7)]                  # per channel wins at 4 bits, loses at 2
    assert pairs_won(configs, judged, lambda c: c.per == "channel", lambda c: c.bits) == 1
    assert pairs_won(configs, judged, lambda c: c.per == "token", lambda c: c.bits) == 1
    assert pairs_won(configs[:3], judged[:3], lambda c: c.per == "channel", lambda c: c.bits) == 1   # a lone side


@pytest.mark.parametrize("config", [Config(2), Config(2, window=False, sink=False), Config(2, window=False),
                                    Config(2, sink=False)], ids=lambda c: c.key)
@pytest.mark.parametrize("T", [1, 30, 31, 32, 70, 96])
def test_the_exact_blocks_are_the_keys_read_exactly_once(config, T):
    layer = QuantizedAttention(1, 4, 100, config, 10_000.0)
    covered = np.zeros((T, T), int)
    for rows, cols in layer.exact_blocks(T):
        covered[rows, cols] += 1
    causal = np.tril(np.ones((T, T), bool))
    assert covered.max(initial=0) <= 1                                     # disjoint
    assert np.array_equal((covered > 0) & causal, causal & ~layer.quantized_mask(T))
