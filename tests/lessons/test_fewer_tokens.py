"""lessons.fewer_tokens: the masks written out, the masked pass against the engine's full pass, the
probe's text and the newline positions."""
from __future__ import annotations

import numpy as np
import pytest

from kvcache.model import Model
from lessons.fewer_tokens import (cache_logits, logits_under_mask, mass_on_first, newline_positions,
                                  repeated_passage, sink_window_mask, window_mask)

CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def test_window_mask_by_hand():
    expected = np.array([[1, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0],
                         [1, 1, 1, 0, 0],
                         [1, 0, 1, 1, 0],
                         [1, 0, 0, 1, 1]], bool)
    np.testing.assert_array_equal(window_mask(5, 2, sinks=1), expected)
    np.testing.assert_array_equal(window_mask(4, 4), np.tril(np.ones((4, 4), bool)))
    np.testing.assert_array_equal(sink_window_mask(5, 1, [2])[4], [0, 0, 1, 0, 1])


def test_the_masked_pass_is_the_full_pass_under_the_causal_mask_and_weights_sum_to_one():
    model = Model.random(CONFIG, seed=5, dtype=np.float64)
    ids = np.random.default_rng(1).integers(0, 64, 24)
    logits, weights = logits_under_mask(model, ids, window_mask(24, 24), first=24)
    np.testing.assert_allclose(logits, model.logits(ids), rtol=1e-10, atol=1e-10)
    assert weights.shape == (2, 4, 24, 24)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
    mass = mass_on_first(weights, 1, from_query=0)
    assert mass.shape == (2, 4) and np.isclose(mass, weights[:, :, :, 0].mean(axis=-1)).all()
    narrow = logits_under_mask(model, ids, window_mask(24, 3))
    np.testing.assert_allclose(narrow[:3], logits[:3], rtol=1e-10)
    assert np.abs(narrow[3:] - logits[3:]).max() > 1e-3
    np.testing.assert_allclose(cache_logits(model, ids, "window", window=3), narrow, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="seeing itself"):
        logits_under_mask(model, ids, np.zeros((24, 24), bool))


class Letters:
    """A tokenizer of one character a token."""

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_newline_positions_and_the_repeated_passage():
    ids = [ord(c) for c in "ab\ncd\n\nef\ng"]
    assert newline_positions(Letters(), ids, 3).tolist() == [2, 5, 6]
    assert newline_positions(Letters(), ids, 2, after=5).tolist() == [6, 9]
    with pytest.raises(ValueError, match="only 4 newline"):
        newline_positions(Letters(), ids, 5)
    probe, start = repeated_passage(list(range(10)), 3, 4)
    assert probe == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2] and start == 7
    with pytest.raises(ValueError, match="has 10 tokens"):
        repeated_passage(list(range(10)), 6, 5)
