"""lessons.shared_prefix: one full pass and the rows past the budget recomputed give what the
masked pass and the engine's evicting caches give, token by token; SnapKV's choice by hand."""
from __future__ import annotations

import numpy as np
import pytest

from kvcache.model import Model
from lessons.fewer_tokens import cache_logits, logits_under_mask, sink_window_mask, streaming_policies, window_mask
from lessons.shared_prefix import Evicting, PositionRule, SnapKV, full_pass, pooled_window_scores, tail_logits

CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
T = 150                    # more than one block of the full pass's queries (128)


@pytest.fixture(scope="module")
def setup():
    model = Model.random(CONFIG, seed=7, dtype=np.float64)
    ids = np.random.default_rng(3).integers(0, 64, T)
    return model, ids, full_pass(model, ids, first=4, fills=(12, 130))


def test_the_full_pass_is_the_models_and_keeps_the_weights_on_the_first_positions(setup):
    model, ids, full = setup
    np.testing.assert_allclose(full.logits(model, slice(None)), model.logits(ids), rtol=1e-10, atol=1e-10)
    _, weights = logits_under_mask(model, ids, window_mask(T, T), first=4)
    np.testing.assert_allclose(full.on_first, weights, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("budget", [12, 130])
def test_the_scores_at_the_fill_are_the_engines(setup, budget):
    model, ids, full = setup
    for score, recent in (("sum", budget // 2), ("last", 1)):
        cache = model.new_cache(1, T, kind="h2o", budget=budget, recent=recent, score=score)
        model.forward(ids[:budget], [budget], cache)
        for layer, layer_cache in enumerate(cache):
            order = np.argsort(layer_cache.positions[0], axis=-1)          # slots in position order
            np.testing.assert_allclose(full.filled[layer][score, budget],
                                       np.take_along_axis(layer_cache.acc[0], order, axis=-1), rtol=1e-9)


def test_rules_of_positions_are_the_masked_pass(setup):
    model, ids, full = setup
    rules = [PositionRule("window", lambda p, j: j > p - 12),
             PositionRule("sinks", lambda p, j: (j < 4) | (j > p - 8)),
             PositionRule("marks", lambda p, j: np.isin(j, [5, 9]) | (j > p - 10))]
    got = tail_logits(model, full, 10, T, rules, scored_from=40)   # "marks" hides 0 from query 10 on
    for row, mask in zip(got, (window_mask(T, 12), window_mask(T, 8, 4), sink_window_mask(T, 10, [5, 9]))):
        np.testing.assert_allclose(row, logits_under_mask(model, ids, mask)[40:], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("budget, recent, sinks, score", [(12, 6, 0, "sum"), (12, 1, 0, "last"), (12, 4, 2, "sum"),
                                                          (130, 65, 0, "sum"), (130, 1, 0, "last")])
def test_eviction_replayed_is_the_engines_cache_token_by_token(setup, budget, recent, sinks, score):
    model, ids, full = setup
    got = tail_logits(model, full, budget, T, [Evicting("h", budget, recent, sinks, score)])[0]
    engine = cache_logits(model, ids, "h2o", budget=budget, recent=recent, sinks=sinks, score=score)
    np.testing.assert_allclose(got, engine[budget:], rtol=1e-9, atol=1e-9)
    earlier = tail_logits(model, full, budget - 5, T, [Evicting("h", budget, recent, sinks, score)])[0]
    np.testing.assert_allclose(earlier, engine[budget - 5:], rtol=1e-9, atol=1e-9)   # rows before the budget too
    assert np.abs(got - full.logits(model, slice(budget, T))).max() > 1e-3     # eviction changed something


def test_the_chapters_policies_stacked_are_each_alone(setup):
    model, ids, full = setup
    policies = streaming_policies(12, [5, 6, 9, 10])
    together = tail_logits(model, full, 8, T, policies)
    for policy, row in zip(policies, together):
        np.testing.assert_allclose(row, tail_logits(model, full, 8, T, [policy])[0], rtol=1e-10, atol=1e-10)
    # the newlines' window (B - 4) hides positions 0 .. 3 from query B - 4 on: its rows start there
    np.testing.assert_allclose(together[2], logits_under_mask(model, ids, sink_window_mask(T, 8, [5, 6, 9, 10]))[8:],
                               rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="4 newlines \\+ window hide keys from queries before row 12"):
        tail_logits(model, full, 12, T, policies)


def test_snapkv_keeps_the_window_and_the_most_voted_by_hand(setup):
    model, ids, full = setup
    prompt, window, budget = 100, 8, 20
    snap = SnapKV("snap", budget, prompt, window=window, kernel=3)
    for layer in range(2):
        q, K = full.queries[layer], full.keys[layer]
        vote = np.zeros((2, prompt - window))
        for h in range(4):                                   # head h reads key/value head h // 2
            for i in range(prompt - window, prompt):
                s = K[: i + 1, h // 2] @ q[i, h] / np.sqrt(8)
                w = np.exp(s - s.max())
                vote[h // 2] += (w / w.sum())[: prompt - window]
        pooled = np.array([[row[max(0, j - 1): j + 2].sum() / 3 for j in range(len(row))] for row in vote])
        np.testing.assert_allclose(pooled_window_scores(full, layer, prompt, window, 3), pooled, rtol=1e-9)
        kept = snap.kept_in_prompt(layer, full)
        assert (kept.sum(axis=1) == budget).all() and kept[:, prompt - window:].all()
        for g in range(2):
            chosen = np.flatnonzero(kept[g, : prompt - window])
            assert pooled[g, chosen].min() >= np.delete(pooled[g], chosen).max()
    # a budget holding the whole prompt keeps everything: the full cache's logits
    whole = tail_logits(model, full, prompt, T, [SnapKV("all", prompt, prompt, window=window)])[0]
    np.testing.assert_allclose(whole, full.logits(model, slice(prompt, T)), rtol=1e-9, atol=1e-9)
    assert np.abs(tail_logits(model, full, prompt, T, [snap])[0] - whole).max() > 1e-3


def test_bad_rows_are_refused(setup):
    model, _, full = setup
    with pytest.raises(ValueError, match="start at its budget 12 or before, not 13"):
        tail_logits(model, full, 13, T, [Evicting("h", 12, 6)])
    with pytest.raises(ValueError, match="end of its prompt"):
        tail_logits(model, full, 12, T, [SnapKV("s", 12, 40)])
    with pytest.raises(ValueError, match="no scores at budget 20"):
        tail_logits(model, full, 20, T, [Evicting("h", 20, 6)])
    with pytest.raises(ValueError, match="start"):
        tail_logits(model, full, 12, T + 1, [PositionRule("w", lambda p, j: j > p - 12)])
