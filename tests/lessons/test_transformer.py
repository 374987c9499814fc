"""lessons.transformer, the appendix's tiny model: cached decoding equals recomputation, greedy
and beam search agree with the sequences' own log-probabilities, and its two building blocks."""
import math

import numpy as np

# ---------------------------------------------------------------- the appendix's tiny model


def test_tiny_model_cached_decoding_equals_recomputation():
    from lessons.transformer import decode_step, forward, init_model, prefill
    model = init_model(seed=3)
    tokens = [1, 2, 3, 4, 5, 6]
    _, caches = prefill(tokens[:2], model)
    for i in range(2, len(tokens)):
        logits, caches = decode_step(tokens[i], i, caches, model)
        np.testing.assert_allclose(logits, forward(tokens[: i + 1], model)[-1], atol=1e-12)
    assert caches[0][0]["k"].shape == (len(tokens), model["cfg"].head_dim)


def test_tiny_model_decoding():
    from lessons.transformer import beam_search, greedy, init_model, sequence_logprob
    model = init_model(seed=0)
    g = greedy([1, 2], 5, model)
    beams = beam_search([1, 2], 5, model, beam_width=2)
    assert len(g) == 7 and g[:2] == [1, 2]
    assert beams[0][1] >= sequence_logprob(g, 2, model) - 1e-12
    assert math.isclose(beams[0][1], sequence_logprob(beams[0][0], 2, model), rel_tol=1e-12)
    # width 1 is greedy
    assert beam_search([1, 2], 5, model, beam_width=1)[0][0] == g


def test_positional_encoding_and_layer_norm():
    from lessons.transformer import layer_norm, positional_encoding
    pe = positional_encoding(10, 8)
    assert pe.shape == (10, 8) and np.all(np.abs(pe) <= 1)
    np.testing.assert_allclose(pe[0], [0, 1] * 4)
    x = np.random.default_rng(0).normal(3, 2, size=(4, 16))
    y = layer_norm(x, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(y.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(y.std(axis=1), 1, atol=1e-4)
