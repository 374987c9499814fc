"""Chapter 13's machinery: RoPE undone exactly, the fake quantizer's half-step bound in both
layouts, the bytes a configuration keeps, and the mask that says which keys a query reads
quantized (a decoding cache's, with and without the window and the sink)."""
from fractions import Fraction

import numpy as np
import pytest

from lessons.harness import kept_bytes_per_token
from lessons.kv_quantization import (GROUP, Config, QuantizedAttention, fake_quantize, first_within,
                                     kept_parts, rotate, unrotate)


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
        def __init__(self, b, p):
            self.bytes_per_token, self.perplexity = b, p
    judged = [J(100, 10.05), J(50, 10.2), J(70, 10.09)]
    assert first_within(judged, 10.0).bytes_per_token == 70
    assert first_within(judged, 9.0) is None
