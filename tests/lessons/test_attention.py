"""Attention computed by hand (lessons.attention) and the decode-step counts (lessons.decode_timing).

References here are written independently of lessons.attention: plain loops over tokens.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from lessons.attention import (append_to_cache, attend, attend_step, attention_weights,
                               causal_attention, causal_attention_weights, causal_mask, decode,
                               decode_with_cache, empty_cache, init_params, prefill,
                               prefill_with_cache, project, scores, softmax, step_without_cache)
from lessons.decode_timing import (flops_cached_step, flops_cached_total, flops_recompute_step,
                                   flops_recompute_total, loglog_slope, measure_generation,
                                   measure_steps, time_samples)
from lessons.examples import four_tokens, three_tokens


def loop_causal_attention(Q, K, V):
    """Causal attention, one query at a time, with math.exp: the test's own reference."""
    T, d = len(Q), len(Q[0])
    out = []
    for i in range(T):
        s = [sum(Q[i][c] * K[j][c] for c in range(d)) / math.sqrt(d) for j in range(i + 1)]
        m = max(s)
        e = [math.exp(x - m) for x in s]
        z = sum(e)
        out.append([sum(e[j] / z * V[j][c] for j in range(i + 1)) for c in range(len(V[0]))])
    return np.array(out)


def rel_err(a, b):
    return float(np.max(np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)))


def random_head(rng, D, d):
    return {name: rng.normal(size=(D, d)) for name in ("Wq", "Wk", "Wv")}


# ---------------------------------------------------------------- softmax


def test_softmax_1d_sums_to_one_and_matches_hand_values():
    w = softmax(np.array([0.0, math.log(3.0)]))
    assert w.shape == (2,)
    np.testing.assert_allclose(w, [0.25, 0.75], rtol=0, atol=1e-15)
    z = math.exp(-2) + math.exp(-1) + 1
    np.testing.assert_allclose(softmax(np.array([1.0, 2.0, 3.0])),
                               [math.exp(-2) / z, math.exp(-1) / z, 1 / z], rtol=1e-14)


def test_softmax_2d_works_along_the_last_axis():
    S = np.array([[0.0, math.log(3.0)], [math.log(3.0), 0.0], [5.0, 5.0]])
    W = softmax(S)
    np.testing.assert_allclose(W, [[0.25, 0.75], [0.75, 0.25], [0.5, 0.5]], atol=1e-15)
    np.testing.assert_allclose(softmax(S.T, axis=0), W.T, atol=1e-15)


@pytest.mark.parametrize("scores_", [[1e4, 1e4 - 1], [-1e4, -1e4 - 1], [1e300, 1e300]])
def test_softmax_is_stable_for_huge_and_tiny_scores(scores_):
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        w = softmax(np.array(scores_))
    assert np.all(np.isfinite(w))
    assert w.sum() == pytest.approx(1.0, abs=1e-15)
    if scores_[0] != scores_[1]:
        np.testing.assert_allclose(w, [math.e / (1 + math.e), 1 / (1 + math.e)], rtol=1e-14)


def test_softmax_gives_masked_scores_exactly_zero_and_leaves_its_input_alone():
    s = np.array([1.0, -np.inf, 2.0])
    before = s.copy()
    w = softmax(s)
    assert w[1] == 0.0
    assert w.sum() == pytest.approx(1.0)
    assert np.array_equal(s, before)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=6),
                  elements=st.floats(-1e6, 1e6)),
       st.floats(-1e3, 1e3))
def test_softmax_properties(s, shift):
    w = softmax(s)
    assert w.shape == s.shape
    assert np.all(w >= 0) and np.all(np.isfinite(w))
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-12)
    # Adding a constant to every score changes nothing (up to the rounding of s + shift).
    np.testing.assert_allclose(softmax(s + shift), w, atol=1e-6)


# ---------------------------------------------------------------- one query


def test_four_token_example_matches_the_figures_to_three_decimals():
    Q, K, V = four_tokens()
    q = Q[-1]
    np.testing.assert_array_equal(np.round(scores(q, K), 3), [0.707, 0.354, 1.061, -0.707])
    np.testing.assert_array_equal(np.round(attention_weights(q, K), 3), [0.297, 0.208, 0.423, 0.072])
    np.testing.assert_array_equal(np.round(attend(q, K, V), 3), [1.07, 1.334])


def test_attend_is_a_weighted_average_of_the_values():
    rng = np.random.default_rng(0)
    q, K, V = rng.normal(size=4), rng.normal(size=(7, 4)), rng.normal(size=(7, 3))
    out = attend(q, K, V)
    assert out.shape == (3,)
    assert np.all(out <= V.max(axis=0) + 1e-12) and np.all(out >= V.min(axis=0) - 1e-12)


# ---------------------------------------------------------------- prefill


def test_causal_mask():
    M = causal_mask(4)
    assert M.dtype == bool and M.shape == (4, 4)
    assert np.array_equal(M, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])


def test_causal_weights_are_lower_triangular_rows_summing_to_one():
    rng = np.random.default_rng(1)
    Q, K = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    W = causal_attention_weights(Q, K)
    assert np.all(W[np.triu_indices(6, k=1)] == 0.0)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-15)


@pytest.mark.parametrize("T, d, d_v, seed", [(1, 1, 1, 0), (5, 2, 3, 1), (9, 4, 4, 2), (16, 8, 5, 3)])
def test_causal_attention_equals_a_loop(T, d, d_v, seed):
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(T, d)), rng.normal(size=(T, d)), rng.normal(size=(T, d_v))
    got = causal_attention(Q, K, V)
    assert got.shape == (T, d_v)
    assert rel_err(got, loop_causal_attention(Q.tolist(), K.tolist(), V.tolist())) < 1e-12


def test_last_row_of_the_four_token_prefill_is_the_decode_step():
    Q, K, V = four_tokens()
    W = causal_attention_weights(Q, K)
    np.testing.assert_array_equal(np.round(W[1, :2], 2), [0.33, 0.67])
    np.testing.assert_array_equal(np.round(W[2, :3], 3), [0.248, 0.248, 0.503])
    np.testing.assert_allclose(W[-1], attention_weights(Q[-1], K), rtol=0, atol=1e-15)
    np.testing.assert_allclose(causal_attention(Q, K, V)[-1], attend(Q[-1], K, V), rtol=0, atol=1e-15)


def test_causal_attention_survives_huge_scores():
    Q = np.array([[1e3, 0.0], [1e3, 1e3]])
    K = Q.copy()
    V = np.array([[1.0, 0.0], [0.0, 1.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        out = causal_attention(Q, K, V)
    np.testing.assert_allclose(out, [[1.0, 0.0], [0.0, 1.0]], atol=1e-12)


# ---------------------------------------------------------------- decode step


def test_three_token_example_step_by_step():
    X, p = three_tokens()
    r = math.exp(1 / math.sqrt(2))
    expected = [[1.0, 0.0],
                [1 / (1 + r), 2 * r / (1 + r)],
                [(1 + r) / (2 + r), (2 + 2 * r) / (2 + r)]]
    outs, cache = decode_with_cache(X, p)
    np.testing.assert_allclose(outs, expected, rtol=1e-14, atol=1e-15)
    # The figures as usually quoted are these values rounded; they are not exact.
    np.testing.assert_array_equal(np.round(outs[1], 2), [0.33, 1.34])
    np.testing.assert_array_equal(np.round(outs[2], 2), [0.75, 1.50])
    assert abs(outs[1][1] - 4 / 3) > 6e-3          # step 2 is not (1/3, 4/3)
    np.testing.assert_array_equal(cache["k"], X)
    np.testing.assert_array_equal(cache["v"], X * [1.0, 2.0])


def test_attend_step_from_an_empty_cache():
    rng = np.random.default_rng(2)
    p = random_head(rng, 5, 3)
    cache = empty_cache(3)
    assert cache["k"].shape == (0, 3) and cache["v"].shape == (0, 3)
    x = rng.normal(size=5)
    out, new = attend_step(x, cache, p)
    assert out.shape == (3,)
    assert new["k"].shape == (1, 3) and new["v"].shape == (1, 3)
    np.testing.assert_allclose(out, x @ p["Wv"], rtol=1e-14)   # one token: weight 1 on its own value


def test_attend_step_with_d_equal_to_one():
    rng = np.random.default_rng(3)
    p = random_head(rng, 4, 1)
    X = rng.normal(size=(6, 4))
    outs = decode(X, p)
    assert outs.shape == (6, 1)
    assert rel_err(outs, prefill(X, p)) < 1e-12


def test_attend_step_does_not_modify_its_input_cache():
    rng = np.random.default_rng(4)
    p = random_head(rng, 6, 4)
    X = rng.normal(size=(8, 6))
    _, cache = prefill_with_cache(X[:7], p)
    k_obj, v_obj = cache["k"], cache["v"]
    k_copy, v_copy = k_obj.copy(), v_obj.copy()
    k_obj.flags.writeable = False
    v_obj.flags.writeable = False
    out, new = attend_step(X[7], cache, p)
    assert set(cache) == {"k", "v"}
    assert cache["k"] is k_obj and cache["v"] is v_obj
    assert np.array_equal(k_obj, k_copy) and np.array_equal(v_obj, v_copy)
    assert new is not cache
    assert not np.shares_memory(new["k"], k_obj) and not np.shares_memory(new["v"], v_obj)
    assert new["k"].shape == (8, 4)
    np.testing.assert_array_equal(new["k"][:7], k_copy)


def test_append_to_cache_copies():
    cache = empty_cache(2)
    new = append_to_cache(cache, np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    assert cache["k"].shape == (0, 2)
    np.testing.assert_array_equal(new["k"], [[1.0, 2.0]])
    np.testing.assert_array_equal(new["v"], [[3.0, 4.0]])


@pytest.mark.parametrize("T, D, d, seed", [(1, 3, 2, 0), (7, 4, 4, 1), (64, 32, 16, 2), (100, 8, 3, 3)])
def test_decode_equals_prefill(T, D, d, seed):
    rng = np.random.default_rng(seed)
    p = init_params(D, d, rng)
    X = rng.normal(size=(T, D))
    assert rel_err(decode(X, p), prefill(X, p)) < 1e-12


def test_prefill_then_decode_equals_prefill():
    rng = np.random.default_rng(5)
    p = init_params(16, 8, rng)
    X = rng.normal(size=(30, 16))
    first, cache = prefill_with_cache(X[:20], p)
    rest, cache = decode_with_cache(X[20:], p, cache)
    assert cache["k"].shape == (30, 8)
    assert rel_err(np.vstack([first, rest]), prefill(X, p)) < 1e-12


def test_decode_of_nothing():
    p = init_params(3, 2, np.random.default_rng(0))
    assert decode(np.zeros((0, 3)), p).shape == (0, 2)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**32 - 1),
       st.floats(0.1, 30.0))
def test_decode_equals_prefill_property(T, D, d, seed, scale):
    rng = np.random.default_rng(seed)
    p = random_head(rng, D, d)
    X = scale * rng.normal(size=(T, D))      # large scales give large, peaked scores
    dec, pre = decode(X, p), prefill(X, p)
    assert np.all(np.isfinite(dec))
    np.testing.assert_allclose(dec, pre, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(pre).max())))


def test_step_without_cache_equals_attend_step():
    rng = np.random.default_rng(6)
    p = init_params(12, 4, rng)
    X = rng.normal(size=(10, 12))
    _, cache = prefill_with_cache(X[:9], p)
    np.testing.assert_allclose(step_without_cache(X, p), attend_step(X[9], cache, p)[0], rtol=1e-12)


def test_project_one_token_or_many():
    rng = np.random.default_rng(7)
    p = random_head(rng, 5, 3)
    X = rng.normal(size=(4, 5))
    Q, K, V = project(X, p)
    q, k, v = project(X[2], p)
    assert Q.shape == (4, 3) and q.shape == (3,)
    np.testing.assert_allclose(K[2], k)
    np.testing.assert_allclose(V[2], v)


# ---------------------------------------------------------------- counts (exact) and the timing helpers (no wall time)


@pytest.mark.parametrize("D, d", [(1, 1), (64, 64), (768, 64)])
def test_totals_are_the_sums_of_the_steps(D, d):
    for n in (1, 2, 7, 100):
        assert flops_cached_total(n, D, d) == sum(flops_cached_step(t, D, d) for t in range(1, n + 1))
        assert flops_recompute_total(n, D, d) == sum(flops_recompute_step(t, D, d) for t in range(1, n + 1))


def test_flop_counts_of_one_step():
    assert flops_cached_step(4096, 768, 64) == 6 * 768 * 64 + 4 * 4096 * 64 == 1_343_488
    assert flops_recompute_step(4096, 768, 64) == 806_453_248
    assert round(flops_recompute_step(4096, 768, 64) / flops_cached_step(4096, 768, 64), 1) == 600.3
    # The ratio tends to D + 1 for long contexts.
    assert flops_recompute_step(10**9, 768, 64) / flops_cached_step(10**9, 768, 64) == pytest.approx(769, rel=1e-5)


def test_timing_helpers_return_positive_times_of_the_right_shape():
    assert len(time_samples(lambda: None, repeats=3, min_sample=1e-5)) == 3
    m = measure_steps([2, 4], D=4, d=2, repeats=2, seed=0)
    assert list(m["t"]) == [2, 4]
    for key in ("cached_s", "recompute_s", "cached_median_s", "recompute_median_s"):
        assert m[key].shape == (2,) and np.all(m[key] > 0)
    g = measure_generation([3], D=4, d=2, repeats=1)
    assert g["cached_s"].shape == (1,) and g["recompute_s"][0] > 0
    assert loglog_slope([1, 2, 4], [3, 12, 48]) == pytest.approx(2.0)
