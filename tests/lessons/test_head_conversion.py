"""lessons.head_conversion on small random models: pooling equal heads changes nothing, the mean
and first pooling are what they say, a full-rank truncation is the same model, a lower rank is
its best approximation, and bad arguments are refused."""
import dataclasses

import numpy as np
import pytest

from kvcache.model import Model
from lessons.head_conversion import energy_kept, kept_latent, kept_pooled, pool_kv_heads, truncate_kv_rank
from lessons.harness import kept_bytes_per_token

CFG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
IDS = [1, 5, 9, 13, 2, 7, 40]


def with_equal_heads(model):
    """The model whose second key/value head is a copy of its first."""
    cfg = model.config
    layers = []
    for w in model.layers:
        wqkv = np.array(w.wqkv)
        q, d = cfg.q_width, cfg.head_dim
        for start in (q, q + cfg.kv_width):                       # the keys, then the values
            wqkv[start + d:start + 2 * d] = wqkv[start:start + d]
        layers.append(dataclasses.replace(w, wqkv=np.asfortranarray(wqkv)))
    return Model(cfg, model.embed, layers, model.norm, model.lm_head)


def test_pooling_equal_heads_changes_nothing():
    model = with_equal_heads(Model.random(CFG, seed=0))
    for how in ("mean", "first"):
        pooled = pool_kv_heads(model, how)
        assert pooled.config.num_key_value_heads == 1
        np.testing.assert_allclose(pooled.logits(IDS), model.logits(IDS), rtol=1e-5, atol=1e-5)


def test_mean_and_first_are_what_they_say():
    model = Model.random(CFG, seed=1)
    cfg = model.config
    q, kv, d = cfg.q_width, cfg.kv_width, cfg.head_dim
    w = model.layers[0].wqkv
    mean, first = (pool_kv_heads(model, how).layers[0].wqkv for how in ("mean", "first"))
    np.testing.assert_allclose(mean[q:q + d], (w[q:q + d] + w[q + d:q + 2 * d]) / 2, rtol=1e-6)
    np.testing.assert_array_equal(first[q + d:q + 2 * d], w[q + kv:q + kv + d])      # head 0's values
    np.testing.assert_array_equal(mean[:q], w[:q])                                    # queries kept
    assert not np.allclose(pool_kv_heads(model, "mean").logits(IDS), model.logits(IDS), atol=1e-3)


def test_full_rank_is_the_same_model_and_lower_ranks_approximate_it():
    model = Model.random(CFG, seed=2)
    np.testing.assert_allclose(truncate_kv_rank(model, 32).logits(IDS), model.logits(IDS), rtol=1e-4, atol=1e-4)
    w = np.asarray(model.layers[1].wqkv, np.float64)[32:]
    S = np.linalg.svd(w, compute_uv=False)
    low = np.asarray(truncate_kv_rank(model, 5).layers[1].wqkv, np.float64)[32:]
    assert np.linalg.matrix_rank(low, tol=1e-4) == 5
    # Eckart-Young: the error of the best rank-5 approximation is the rest of the singular values
    assert np.linalg.norm(w - low) == pytest.approx(np.sqrt((S[5:] ** 2).sum()), rel=1e-4)
    assert energy_kept(model, 32) == pytest.approx(1.0) and 0 < energy_kept(model, 5) < energy_kept(model, 20) < 1


def test_bad_arguments_are_refused():
    model = Model.random(CFG, seed=3)
    with pytest.raises(ValueError, match="how must be one of mean, first"):
        pool_kv_heads(model, "max")
    with pytest.raises(ValueError, match="rank must be between 1 and 32"):
        truncate_kv_rank(model, 33)


def test_what_each_cache_keeps():
    assert kept_bytes_per_token(30, kept_pooled(64)) == 2 * 30 * 64 * 4
    assert kept_bytes_per_token(30, kept_latent(128)) == 30 * 128 * 4
    assert kept_bytes_per_token(30, kept_latent(128, bits=16)) == 30 * 128 * 2
