"""lessons.latent_attention: the absorbed step against attention over rebuilt keys and values
(the engine's), its cache and inputs, the step costs counted by hand, RoPE breaking absorption
and the decoupled key repairing it."""
import math

import numpy as np
import pytest

from kvcache.gqa import causal_attention
from lessons.latent_attention import (absorbed_scores, decompress, decoupled_params, decoupled_scores,
                                      empty_latent_cache, latent_attend_step, latent_params, rope,
                                      roped_scores, step_costs)


def decode(X, p, H):
    cache, outs = empty_latent_cache(p["Wdkv"].shape[1]), []
    for x_t in X:
        out, cache = latent_attend_step(x_t, cache, p, H)
        outs.append(out)
    return np.array(outs), cache


@pytest.mark.parametrize("D, H, d, r, T", [(12, 3, 4, 5, 7), (6, 1, 3, 1, 4), (8, 2, 2, 9, 5)])
def test_the_absorbed_step_gives_the_rows_of_attention_over_rebuilt_keys(D, H, d, r, T):
    p = latent_params(D, H, d, r, draw=D + r)
    X = np.random.default_rng(T).standard_normal((T, D))
    rows, cache = decode(X, p, H)
    K, V = decompress(X @ p["Wdkv"], p, H)
    full = causal_attention((X @ p["Wq"]).reshape(T, H, d), K, V).reshape(T, H * d)
    np.testing.assert_allclose(rows, full, rtol=1e-10, atol=1e-12)
    assert set(cache) == {"c"} and cache["c"].shape == (T, r)
    np.testing.assert_allclose(cache["c"], X @ p["Wdkv"], rtol=1e-14)


def test_the_step_leaves_its_input_cache_and_survives_large_scores():
    p = latent_params(5, 2, 3, 4, draw=1)
    p["Wq"] *= 300.0
    c = np.random.default_rng(2).standard_normal((3, 4))
    c.flags.writeable = False
    cache = {"c": c}
    out, new = latent_attend_step(np.ones(5) * 20, cache, p, 2)
    assert np.all(np.isfinite(out)) and new["c"].shape == (4, 4) and cache["c"] is c and new["c"] is not c


def test_step_costs_by_hand():
    # t = 3 cached (4 after), D = 10, H = 2, d = 3, r = 5, 2 bytes a number
    costs = step_costs(3, D=10, H=2, d=3, r=5, bytes_per_number=2)
    common = 2 * 10 * 5 + 2 * 10 * 2 * 3                           # latent, query
    assert costs["naive"].flops == common + 4 * 4 * 5 * 6 + 4 * 4 * 6
    assert costs["absorbed"].flops == common + 2 * 6 * 5 + 4 * 4 * 2 * 5 + 2 * 2 * 5 * 3
    weights = 10 * 6 + 10 * 5 + 2 * 5 * 6
    assert costs["absorbed"].bytes == 2 * (weights + 4 * 5)
    assert costs["naive"].bytes == 2 * (weights + 4 * 5 + 4 * 4 * 6)
    # a long cache: the ratio of operations per cached token tends to (4 r H d + 4 H d) / (4 H r)
    big = step_costs(10**7, D=5120, H=128, d=128, r=512)
    assert big["naive"].flops / big["absorbed"].flops == pytest.approx(128 + 128 / 512, rel=1e-3)


def test_rope_breaks_absorption_except_at_position_zero():
    p = latent_params(16, 2, 8, 6, draw=3)
    X = np.random.default_rng(4).standard_normal((6, 16))
    truth = roped_scores(X, p, 2)
    q = rope((X[-1] @ p["Wq"]).reshape(1, 2, 8), [5])[0]
    tried = absorbed_scores(q, X @ p["Wdkv"], p, 2)
    np.testing.assert_allclose(tried[:, 0], truth[:, 0], rtol=1e-12)      # R_0 = I
    assert np.abs(tried[:, 1:] - truth[:, 1:]).max() > 0.1
    # without rotation the absorbed scores are the scores of rebuilt keys
    K, _ = decompress(X @ p["Wdkv"], p, 2)
    plain = np.einsum("hd,jhd->hj", (X[-1] @ p["Wq"]).reshape(2, 8), K) / math.sqrt(8)
    np.testing.assert_allclose(absorbed_scores((X[-1] @ p["Wq"]).reshape(2, 8), X @ p["Wdkv"], p, 2), plain,
                               rtol=1e-12)


def test_the_decoupled_key_makes_absorption_exact_again():
    p = decoupled_params(16, 3, 8, 6, 4, draw=5)
    X = np.random.default_rng(6).standard_normal((7, 16))
    naive = decoupled_scores(X, p, 3, absorbed=False)
    np.testing.assert_allclose(decoupled_scores(X, p, 3, absorbed=True), naive, rtol=1e-12, atol=1e-14)
    assert naive.shape == (3, 7)
    # without the rotated part the scores are the plain latent scores, scaled by sqrt(d + d_R)
    K, _ = decompress(X @ p["Wdkv"], p, 3)
    content = np.einsum("hd,jhd->hj", (X[-1] @ p["Wq"]).reshape(3, 8), K) / math.sqrt(8 + 4)
    assert not np.allclose(naive, content)
