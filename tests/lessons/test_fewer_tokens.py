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


def test_the_policies_bytes_and_losses():
    from lessons.fewer_tokens import bytes_per_position, policy_logits, token_losses
    model = Model.random(CONFIG, seed=6, dtype=np.float64)
    ids = np.random.default_rng(2).integers(0, 64, 30)
    assert bytes_per_position(model) == 2 * 2 * 2 * 8 * 4                  # k and v, 2 layers, 2 heads of 8
    np.testing.assert_allclose(policy_logits(model, ids, "4 sinks + window", 10),
                               logits_under_mask(model, ids, window_mask(30, 6, 4)), rtol=1e-12)
    np.testing.assert_allclose(policy_logits(model, ids, "4 newlines + window", 10, [3, 5, 7, 9]),
                               logits_under_mask(model, ids, sink_window_mask(30, 6, [3, 5, 7, 9])), rtol=1e-12)
    full = model.logits(ids)
    for policy in ("window", "H2O", "TOVA"):                               # a budget holding the text
        np.testing.assert_allclose(policy_logits(model, ids, policy, 30), full, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="no policy"):
        policy_logits(model, ids, "LRU", 10)
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [1 / 3] * 3]))
    np.testing.assert_allclose(token_losses(logits, [0, 1, 2]), [-np.log(0.25), -np.log(0.1)])
