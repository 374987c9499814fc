"""Rotary positions, RMSNorm and SwiGLU against their definitions, and grouped attention's grouping."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvcache.gqa import attend_new_tokens, causal_attention, decode_attention
from kvcache.norm import rms_norm, silu, swiglu
from kvcache.rope import apply_rope, inverse_frequencies, rope_cos_sin


def test_inverse_frequencies():
    np.testing.assert_allclose(inverse_frequencies(8, 10000.0), [1.0, 0.1, 0.01, 0.001])


def test_rope_turns_each_pair_by_its_angle():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 8))
    pos = np.array([0, 5, 17])
    out = apply_rope(x, *rope_cos_sin(pos, 8, 100.0))
    w = inverse_frequencies(8, 100.0)
    for n, p in enumerate(pos):
        for i in range(4):
            a = p * w[i]
            rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
            for h in range(2):
                np.testing.assert_allclose(out[n, h, [i, i + 4]], rot @ x[n, h, [i, i + 4]], atol=1e-12)
    np.testing.assert_array_equal(out[0], x[0])                    # position 0 does not turn


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 500), st.integers(0, 500), st.integers(0, 100))
def test_rope_scores_depend_on_relative_position_only(p, p2, shift):
    rng = np.random.default_rng(p * 1000 + p2)
    q, k = rng.standard_normal((1, 1, 16)), rng.standard_normal((1, 1, 16))

    def score(a, b):
        return (apply_rope(q, *rope_cos_sin([a], 16, 10000.0)) * apply_rope(k, *rope_cos_sin([b], 16, 10000.0))).sum()

    np.testing.assert_allclose(score(p, p2), score(p + shift, p2 + shift), rtol=1e-9, atol=1e-9)


def test_rms_norm_and_swiglu_follow_their_formulas():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 6)), rng.standard_normal(6)
    want = x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(rms_norm(x, w, 1e-5), want, rtol=1e-12)
    z = np.array([-800.0, -3.0, 0.0, 2.0, 800.0])
    np.testing.assert_allclose(silu(z), [0.0, -3 / (1 + np.exp(3)), 0.0, 2 / (1 + np.exp(-2)), 800.0], atol=1e-12)
    wg, wu, wd = rng.standard_normal((5, 6)), rng.standard_normal((5, 6)), rng.standard_normal((6, 5))
    g = x @ wg.T
    want = (g / (1 + np.exp(-g)) * (x @ wu.T)) @ wd.T
    np.testing.assert_allclose(swiglu(x, np.concatenate([wg, wu]), wd), want, rtol=1e-10)


def grouped_reference(q, k, v):
    """Each query head h on key/value head h // (H / G), causal, one head at a time."""
    T, H, d = q.shape
    G = k.shape[1]
    out = np.zeros_like(q)
    for h in range(H):
        g = h // (H // G)
        s = q[:, h] @ k[:, g].T / np.sqrt(d)
        s[np.triu_indices(T, 1)] = -np.inf
        w = np.exp(s - s.max(1, keepdims=True))
        out[:, h] = (w / w.sum(1, keepdims=True)) @ v[:, g]
    return out


def test_grouped_causal_attention_and_query_blocks():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((700, 6, 4)), rng.standard_normal((700, 2, 4)), rng.standard_normal((700, 2, 4))
    np.testing.assert_allclose(causal_attention(q, k, v), grouped_reference(q, k, v), rtol=1e-10, atol=1e-12)
    # the last 3 queries against the whole cache equal the last 3 rows of full attention
    tail = attend_new_tokens(q[-3:], k.transpose(1, 0, 2), v.transpose(1, 0, 2))
    np.testing.assert_allclose(tail, grouped_reference(q, k, v)[-3:], rtol=1e-10, atol=1e-12)


def test_decode_attention_uses_each_length():
    rng = np.random.default_rng(3)
    B, H, G, T, d = 3, 4, 2, 9, 4
    q = rng.standard_normal((B, H, d))
    K, V = rng.standard_normal((B, G, T, d)), rng.standard_normal((B, G, T, d))
    lengths = np.array([9, 1, 5])
    out = decode_attention(q, K, V, lengths)
    for b, t in enumerate(lengths):
        for h in range(H):
            g = h // 2
            s = K[b, g, :t] @ q[b, h] / 2.0
            w = np.exp(s - s.max())
            np.testing.assert_allclose(out[b, h], (w / w.sum()) @ V[b, g, :t], rtol=1e-12)


@pytest.mark.parametrize("r, G, length", [(3, 3, 513), (1, 4, 7), (8, 1, 40), (2, 2, 1)])
def test_decode_attention_of_one_sequence(r, G, length):
    """A batch of one (its own products per kv head, no mask: the cache is read up to its length)
    gives plain attention per query head; junk past the length changes nothing; float32 stays
    float32."""
    rng = np.random.default_rng(r * 100 + G)
    d, T = 16, length + 5
    q = rng.standard_normal((1, G * r, d))
    K, V = rng.standard_normal((1, G, T, d)), rng.standard_normal((1, G, T, d))
    out = decode_attention(q, K, V, np.array([length]))
    for h in range(G * r):
        np.testing.assert_allclose(out[0, h], one_head_decode(q[0, h], K[0, h // r], V[0, h // r], length),
                                   rtol=1e-10, atol=1e-12)
    K[0, :, length:], V[0, :, length:] = 1e6, np.nan
    np.testing.assert_array_equal(decode_attention(q, K, V, np.array([length])), out)
    q32, K32, V32 = (a.astype(np.float32) for a in (q, K, V))
    got32 = decode_attention(q32, K32, V32, np.array([length]))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, out, rtol=1e-4, atol=1e-5)


def one_head_decode(q, K, V, t):
    """softmax(K[:t] q / sqrt(d)) V[:t] for one query head and its key/value head."""
    s = K[:t] @ q / np.sqrt(len(q))
    w = np.exp(s - s.max())
    return (w / w.sum()) @ V[:t]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([1, 2, 4]), st.integers(1, 3), st.booleans())
def test_decode_attention_over_many_key_blocks(seed, r, G, transposed):
    """Long caches are multiplied block by block (whole blocks, then the positions left over):
    every length, inside a block, on a block's edge and in the last partial block, gives plain
    attention; finite junk past a length changes nothing; a strided view (the paged cache's
    gather, [B, T, G, d] transposed) gives the same as a contiguous buffer."""
    import kvcache.gqa as gqa

    rng = np.random.default_rng(seed)
    d, B, block = 8, 3, 16
    T = 2 * block + int(rng.integers(0, block))                  # two whole blocks and a partial one
    lengths = np.array([T, block, int(rng.integers(1, T))])
    if transposed:
        K = rng.standard_normal((B, T, G, d)).transpose(0, 2, 1, 3)
        V = rng.standard_normal((B, T, G, d)).transpose(0, 2, 1, 3)
    else:
        K, V = rng.standard_normal((B, G, T, d)), rng.standard_normal((B, G, T, d))
    q = rng.standard_normal((B, G * r, d))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gqa, "BLOCK_PRODUCT", block * r * d)       # blocks of 16 positions
        out = decode_attention(q, K, V, lengths)
        K_junk, V_junk = np.array(K), np.array(V)
        K_junk[2, :, lengths[2]:], V_junk[2, :, lengths[2]:] = 1e6, -1e6
        np.testing.assert_array_equal(decode_attention(q, K_junk, V_junk, lengths)[2], out[2])
        q32, K32, V32 = q.astype(np.float32), K.astype(np.float32), V.astype(np.float32)
        assert decode_attention(q32, K32, V32, lengths).dtype == np.float32
    for b, t in enumerate(lengths):
        for h in range(G * r):
            np.testing.assert_allclose(out[b, h], one_head_decode(q[b, h], K[b, h // r], V[b, h // r], t),
                                       rtol=1e-10, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 20), st.integers(1, 70), st.integers(1, 9))
def test_linear_for_any_number_of_rows(seed, rows, out, width):
    """x W^T, whichever way it is taken (a matrix-vector product, W in blocks of rows with the
    rows left over, or as written): the product of its definition, in the inputs' dtype."""
    import kvcache.linear as linear_module

    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((rows, width)), rng.standard_normal((out, width))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(linear_module, "SMALL_PRODUCT", 3 * width * rows)     # blocks of 3 rows of w
        patch.setattr(linear_module, "BLOCK_ROWS", 8)
        got = linear_module.linear(x, w)
        got32 = linear_module.linear(x.astype(np.float32), w.astype(np.float32))
    want = np.einsum("ni,oi->no", x, w)
    assert got.shape == (rows, out)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 5), st.integers(1, 4), st.integers(2, 3))
def test_decode_attention_cut_across_threads_is_the_same(seed, B, G, threads):
    """A large grouped step is cut into parts, by sequences or by key/value heads, computed on
    several threads: the same numbers as one thread, every length respected."""
    import kvcache.gqa as gqa

    rng = np.random.default_rng(seed)
    r, d, T = 2, 8, 40
    q = rng.standard_normal((B, G * r, d))
    K, V = rng.standard_normal((B, G, T, d)), rng.standard_normal((B, G, T, d))
    lengths = rng.integers(1, T + 1, size=B)
    alone = decode_attention(q, K, V, lengths)                 # 51 KiB: under PARALLEL_BYTES
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gqa, "PARALLEL_BYTES", 0)
        patch.setattr(gqa, "blas_threads", lambda: threads)
        calls = []
        patch.setattr(gqa, "_split_across_threads",
                      lambda *a, f=gqa._split_across_threads: calls.append(a[-1]) or f(*a))
        split = decode_attention(q, K, V, lengths)
    assert calls == ([min(threads, max(B, G))] if max(B, G) > 1 else [])
    np.testing.assert_allclose(split, alone, rtol=1e-12, atol=1e-14)
    for b, t in enumerate(lengths):
        for h in range(G * r):
            np.testing.assert_allclose(split[b, h], one_head_decode(q[b, h], K[b, h // r], V[b, h // r], t),
                                       rtol=1e-10, atol=1e-12)
