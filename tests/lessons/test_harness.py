"""lessons.harness: the measures on cases whose KL, top-1 and perplexity are known exactly, the
bytes a cache keeps counted by hand, and the harness run on a small random model."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from kvcache.model import Model
from lessons.harness import Kept, full_cache, judge, judge_logits, judge_rows, kept_bytes_per_token

CFG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def test_kl_top1_and_perplexity_of_a_case_known_exactly():
    # Reference r = (1/2, 1/4, 1/4) at every position, the changed cache uniform p = 1/3 each:
    # KL(r || p) = 1/2 ln(3/2) + 2 x 1/4 ln(3/4) = ln 3 - (3/2) ln 2; the uniform distribution's
    # perplexity is V = 3 whatever the tokens; top-1: r's argmax is token 0, uniform's (a tie) too.
    T = 5
    reference = np.tile(np.log([0.5, 0.25, 0.25]), (T, 1))
    uniform = np.zeros((T, 3))
    ids = [0, 2, 1, 1, 0]
    j = judge_logits("uniform", reference, uniform, ids, 10)
    assert j.kl_mean == pytest.approx(math.log(3) - 1.5 * math.log(2), abs=1e-15)
    assert j.perplexity == pytest.approx(3.0, rel=1e-15)
    assert j.top1 == 1.0 and j.positions == T - 1 and j.bytes_per_token == 10
    # the reference against itself: nothing changed; its perplexity is exp of the mean surprise
    # of the true next tokens 2, 1, 1, 0: -(ln 1/4 + ln 1/4 + ln 1/4 + ln 1/2) / 4 = (7/4) ln 2
    same = judge_logits("full", reference, reference, ids, 10)
    assert same.kl_mean == 0 and same.top1 == 1.0
    assert same.perplexity == pytest.approx(2 ** 1.75, rel=1e-14)


def test_top1_counts_positions_that_changed_their_most_likely_token():
    reference = np.log([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.3, 0.3, 0.4]])
    other = np.log([[0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]])
    j = judge_logits("x", reference, other, [0, 1, 2, 0], 0)
    assert j.top1 == pytest.approx(1 / 3)             # rows 0 and 2 changed; row 3 predicts nothing
    # row 1 is the same distribution; rows 0 and 2 swap two probabilities
    kl0 = 0.7 * math.log(0.7 / 0.2) + 0.2 * math.log(0.2 / 0.7)
    kl2 = 0.2 * math.log(0.2 / 0.6) + 0.6 * math.log(0.6 / 0.2)
    assert j.kl_mean == pytest.approx((kl0 + kl2) / 3, rel=1e-12)


def test_bytes_kept_count_every_part():
    # a full float32 cache of SmolLM2's shape: 2 x 30 x 3 x 64 x 4 bytes
    assert kept_bytes_per_token(30, full_cache(3, 64)) == 46_080
    assert kept_bytes_per_token(30, full_cache(3, 64, bits=16)) == 23_040
    # 4-bit codes with a 16-bit scale and offset per group of 32 numbers, keys and values of 2
    # heads of 64: 256 x 4 / 8 + 256 / 32 x 2 x 2 bytes a layer
    parts = [Kept("codes", 256, 4), Kept("scales", Fraction(256, 32), 16), Kept("offsets", Fraction(256, 32), 16)]
    assert kept_bytes_per_token(2, parts) == 2 * (128 + 16 + 16)
    # a share of a full-precision window: 1/3 of a byte is kept exactly
    assert kept_bytes_per_token(1, [Kept("window", Fraction(1, 3), 8)]) == Fraction(1, 3)
    with pytest.raises(ValueError, match="n_layers must be at least 1"):
        kept_bytes_per_token(0, parts)
    with pytest.raises(ValueError, match="numbers must be >= 0 and bits >= 1"):
        kept_bytes_per_token(1, [Kept("codes", 4, 0)])


def test_logits_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match="must both be"):
        judge_logits("x", np.zeros((3, 4)), np.zeros((3, 5)), [0, 1, 2], 0)
    with pytest.raises(ValueError, match="T >= 2"):
        judge_logits("x", np.zeros((1, 4)), np.zeros((1, 4)), [0], 0)


def test_the_harness_runs_a_model_over_the_tokens():
    model = Model.random(CFG, seed=4)
    ids = [3, 9, 27, 17, 51, 25, 11]
    reference = model.logits(ids)
    j = judge("itself", model, ids, reference, full_cache(2, 8))
    assert j.kl_mean == pytest.approx(0, abs=1e-12) and j.top1 == 1.0 and j.positions == 6
    assert j.bytes_per_token == 2 * 2 * 2 * 8 * 4
    other = judge("another model", Model.random(CFG, seed=5), ids, reference, full_cache(2, 8))
    assert other.kl_mean > 0.01 and 0 <= other.top1 <= 1 and other.perplexity > 1


def test_judge_rows_is_judge_logits_row_by_row():
    rng = np.random.default_rng(3)
    T, V = 37, 50                                   # 36 positions: two chunks of 16 and one of 4
    reference = rng.standard_normal((T, V)) * 3
    rows = reference + rng.standard_normal((3, T, V)) * np.array([0.0, 0.5, 4.0])[:, None, None]
    ids = rng.integers(0, V, T)
    together = judge_rows(["a", "b", "c"], reference, rows, ids, [1, 2, 3])
    for j, name, logits, kept in zip(together, "abc", rows, (1, 2, 3)):
        alone = judge_logits(name, reference, logits, ids, kept)
        assert j.name == alone.name and j.bytes_per_token == alone.bytes_per_token and j.positions == T - 1
        assert j.kl_mean == pytest.approx(alone.kl_mean, rel=1e-12, abs=1e-15)
        assert j.perplexity == pytest.approx(alone.perplexity, rel=1e-12) and j.top1 == alone.top1
    assert together[0].kl_mean == 0.0 and together[0].top1 == 1.0
    assert together[0].kl_mean < together[1].kl_mean < together[2].kl_mean


def test_judge_rows_refuses_what_does_not_match():
    reference = np.zeros((4, 5))
    with pytest.raises(ValueError, match="must be"):
        judge_rows(["a"], reference, np.zeros((4, 5)), [0, 1, 2, 3], [1])          # not (n, T, V)
    with pytest.raises(ValueError, match="as many names"):
        judge_rows(["a"], reference, np.zeros((2, 4, 5)), [0, 1, 2, 3], [1, 1])
