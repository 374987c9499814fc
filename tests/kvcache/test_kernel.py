"""kvcache.kernel: the blockwise kernel against plain attention.

The reference is ``lessons.attention`` (chapters 1 and 2: one softmax over the rows given, no
blocks, no buffer), which shares no code with ``kvcache.kernel``, and PyTorch's
``scaled_dot_product_attention``, a real implementation from outside the project.  Hypothesis draws buffers,
lengths, blocks and tails (NaN, inf, large numbers) for every variant: the decode step, the
causal chunk, the transposed form, split-K and the paged walk over random block tables.  Timing
the kernel, and planning it on other machines, is ``tests/lessons/test_kernel_timing.py``'s.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcache import kernel as kn
from lessons.attention import attend, causal_attention

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TAILS = ["nan", "inf", "-inf", "large", "random", "mixed"]


def fill_tail(K, V, t, tail, rng):
    """Rows t.. of K and V set to what an unused row may hold."""
    if tail == "nan":
        K[t:], V[t:] = np.nan, np.nan
    elif tail == "inf":
        K[t:], V[t:] = np.inf, np.inf
    elif tail == "-inf":
        K[t:], V[t:] = -np.inf, -np.inf
    elif tail == "large":
        K[t:] *= 1e3
        V[t:] = 1e300
    elif tail == "mixed":
        K[t::3], V[t::3] = np.nan, np.inf
        K[t + 1::3], V[t + 1::3] = np.inf, np.nan
        K[t + 2::3], V[t + 2::3] = -np.inf, 1e308


@st.composite
def buffers(draw, max_rows=70):
    N = draw(st.integers(1, max_rows))
    t = draw(st.integers(1, N))
    block = draw(st.one_of(st.integers(1, 12), st.sampled_from([16, 31, 32, 64, 100, 1000])))
    d, d_v = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 60.0]))
    tail = draw(st.sampled_from(TAILS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = rng.standard_normal(d) * scale
    K = rng.standard_normal((N, d)) * scale
    V = rng.standard_normal((N, d_v))
    clean_K, clean_V = K[:t].copy(), V[:t].copy()
    fill_tail(K, V, t, tail, rng)
    return q, K, V, t, block, clean_K, clean_V


def same(a, b):
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


# ---------------------------------------------------------------- the decode step


@SETTINGS
@given(buffers())
def test_blocked_decode_is_plain_attention_over_the_first_seq_len_rows(case):
    q, K, V, t, block, clean_K, clean_V = case
    before = [q.copy(), K.copy(), V.copy()]
    out, visited = kn.blocked_decode(q, K, V, t, block)
    assert visited == math.ceil(t / block) and type(visited) is int
    assert out.shape == (V.shape[1],) and out.dtype == np.float64
    assert np.allclose(out, attend(q, clean_K, clean_V), rtol=1e-10, atol=1e-12)
    assert all(same(a, b) for a, b in zip(before, (q, K, V))), "an input was modified"


@SETTINGS
@given(buffers())
def test_the_loop_without_its_early_exit_gives_the_same_and_reads_the_whole_buffer(case):
    q, K, V, t, block, clean_K, clean_V = case
    out, visited = kn.full_buffer_decode(q, K, V, t, block)
    assert visited == math.ceil(K.shape[0] / block)
    assert np.allclose(out, kn.blocked_decode(q, K, V, t, block)[0], rtol=1e-12, atol=1e-14)


@SETTINGS
@given(buffers())
def test_the_walk_masks_only_its_last_block_and_its_maximum_never_drops(case):
    q, K, V, t, block, _, _ = case
    states = kn.walk_blocks(q, K, V, t, block)
    assert [s.block for s in states] == list(range(math.ceil(t / block)))
    assert [s.masked for s in states[:-1]] == [False] * (len(states) - 1)
    assert states[-1].masked == (states[-1].stop > t)
    assert states[-1].stop == min(len(states) * block, K.shape[0])
    maxima = [float(s.M[0]) for s in states]
    assert maxima == sorted(maxima)
    # the state after each block is the softmax over the rows read so far, computed at once
    s = K[:t] @ q / math.sqrt(q.shape[0])
    for state in states:
        seen = s[:min(state.stop, t)]
        assert math.isclose(float(state.M[0]), float(seen.max()), rel_tol=1e-12, abs_tol=1e-12)
        assert math.isclose(float(state.l[0]), float(np.exp(seen - seen.max()).sum()), rel_tol=1e-10)


def test_without_the_value_mask_a_nan_tail_poisons_the_output_and_without_the_score_mask_it_counts():
    rng = np.random.default_rng(0)
    K, V, q = rng.standard_normal((16, 4)), rng.standard_normal((16, 4)), rng.standard_normal(4)
    plain = attend(q, K[:10], V[:10])
    K_nan, V_nan = K.copy(), V.copy()
    K_nan[10:], V_nan[10:] = np.nan, np.nan
    assert np.allclose(kn.walk_blocks(q, K_nan, V_nan, 10, 4)[-1].output()[0], plain)
    assert np.all(np.isnan(kn.walk_blocks(q, K_nan, V_nan, 10, 4, mask_values=False)[-1].output()))
    assert np.all(np.isnan(kn.walk_blocks(q, K_nan, V_nan, 10, 4, mask_scores=False)[-1].output()))
    # a finite tail: the value mask is invisible, the score mask is not
    K_old, V_old = K.copy(), V.copy()
    K_old[10:] = 3 * q
    assert np.allclose(kn.walk_blocks(q, K_old, V_old, 10, 4, mask_values=False)[-1].output()[0], plain)
    assert not np.allclose(kn.walk_blocks(q, K_old, V_old, 10, 4, mask_scores=False)[-1].output()[0], plain,
                           rtol=1e-3)
    # a length that fills its last block needs no mask at all: both switches change nothing
    for options in ({"mask_values": False}, {"mask_scores": False}):
        assert np.allclose(kn.walk_blocks(q, K_nan, V_nan, 8, 4, **options)[-1].output()[0], attend(q, K[:8], V[:8]))


def test_large_scores_do_not_overflow():
    rng = np.random.default_rng(1)
    q, K, V = rng.standard_normal(8) * 100, rng.standard_normal((300, 8)) * 100, rng.standard_normal((300, 8))
    assert float(np.max(K @ q)) / math.sqrt(8) > 1e4
    with np.errstate(over="raise", invalid="raise", divide="raise"):    # underflow to 0 is fine
        out, _ = kn.blocked_decode(q, K, V, 300, 32)
    assert np.allclose(out, attend(q, K, V), rtol=1e-10)


def test_the_notes_shapes():
    assert kn.gemm_shapes(32, 32, 8) == [("gemm0 = Q x K", "[32 x 8]", "[8 x 32]", "[32 x 32]"),
                                         ("softmax", "[32 x 32]", "", "[32 x 32]"),
                                         ("gemm1 = P x V", "[32 x 32]", "[32 x 8]", "[32 x 8]")]
    assert kn.gemm_shapes(1, 33, 8) == [("gemm0 = Q x K", "[1 x 8]", "[8 x 33]", "[1 x 33]"),
                                        ("softmax", "[1 x 33]", "", "[1 x 33]"),
                                        ("gemm1 = P x V", "[1 x 33]", "[33 x 8]", "[1 x 8]")]
    # prefill of the 32-token prompt, then decode at 33, in a buffer of 4096 rows
    rng = np.random.default_rng(2)
    Q, K, V = (rng.standard_normal((33, 8)) for _ in range(3))
    K_buf, V_buf = np.full((4096, 8), np.nan), np.full((4096, 8), np.nan)
    K_buf[:33], V_buf[:33] = K, V
    out, visited = kn.blocked_prefill(Q[:32], K_buf, V_buf, 32, 32)
    assert visited == 1 and np.allclose(out, causal_attention(Q[:32], K[:32], V[:32]), rtol=1e-10)
    out, visited = kn.blocked_decode(Q[32], K_buf, V_buf, 33, 32)
    assert visited == 2 and np.allclose(out, attend(Q[32], K, V), rtol=1e-10)


def test_float32_buffers_are_computed_in_float32_without_a_copy_of_the_buffer():
    rng = np.random.default_rng(3)
    K = rng.standard_normal((1000, 16)).astype(np.float32)
    V = rng.standard_normal((1000, 16)).astype(np.float32)
    q = rng.standard_normal(16).astype(np.float32)
    out, _ = kn.blocked_decode(q, K, V, 700, 64)
    assert out.dtype == np.float32
    assert np.allclose(out, attend(q, K[:700], V[:700]), rtol=1e-4, atol=1e-6)
    assert kn.blocked_decode(q.astype(np.float64), K, V, 700, 64)[0].dtype == np.float64
    assert kn.blocked_decode(np.ones(2, dtype=np.int64), np.ones((3, 2), np.int32), np.ones((3, 2), np.int32),
                             2, 1)[0].dtype == np.float64
    assert kn.one_shot_decode(q, K, V).dtype == np.float32


# ---------------------------------------------------------------- the causal chunk and the transposed form


@st.composite
def chunks(draw):
    q, K, V, t, block, clean_K, clean_V = draw(buffers())
    m = draw(st.integers(1, t))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    Q = rng.standard_normal((m, q.shape[0])) * draw(st.sampled_from([0.5, 1.0, 30.0]))
    return Q, K, V, t, block, clean_K, clean_V


def causal_rows(Q, K, V, t):
    """Rows of causal attention for queries at positions t - m .. t - 1 (chapter 1's mask)."""
    m = Q.shape[0]
    Q_full = np.vstack([np.zeros((t - m, Q.shape[1])), Q])
    return causal_attention(Q_full, K, V)[t - m:]


@SETTINGS
@given(chunks())
def test_a_chunk_of_queries_is_causal_attention(case):
    Q, K, V, t, block, clean_K, clean_V = case
    out, visited = kn.blocked_prefill(Q, K, V, t, block)
    assert visited == math.ceil(t / block) and out.shape == (Q.shape[0], V.shape[1])
    assert np.allclose(out, causal_rows(Q, clean_K, clean_V, t), rtol=1e-9, atol=1e-12)


@SETTINGS
@given(chunks())
def test_the_transposed_form_equals_the_blockwise_form(case):
    Q, K, V, t, block, clean_K, clean_V = case
    out_t, visited_t = kn.transposed_prefill(Q, K, V, t, block)
    out, visited = kn.blocked_prefill(Q, K, V, t, block)
    assert visited_t == visited and out_t.shape == out.shape
    assert np.allclose(out_t, out, rtol=1e-12, atol=1e-14)
    assert np.allclose(out_t, causal_rows(Q, clean_K, clean_V, t), rtol=1e-9, atol=1e-12)


def test_a_decode_step_is_a_chunk_of_one():
    rng = np.random.default_rng(4)
    K, V, q = rng.standard_normal((50, 5)), rng.standard_normal((50, 5)), rng.standard_normal(5)
    assert np.array_equal(kn.blocked_prefill(q[None], K, V, 31, 8)[0][0], kn.blocked_decode(q, K, V, 31, 8)[0])


# ---------------------------------------------------------------- split-K


@SETTINGS
@given(buffers(max_rows=120), st.integers(1, 12), st.sampled_from([1, 2, 3]))
def test_split_k_is_exact(case, splits, workers):
    q, K, V, t, block, clean_K, clean_V = case
    out, visited = kn.split_k_decode(q, K, V, t, block, splits, workers=workers)
    assert visited == math.ceil(t / block)
    assert np.allclose(out, kn.blocked_decode(q, K, V, t, block)[0], rtol=1e-10, atol=1e-12)
    assert np.allclose(out, attend(q, clean_K, clean_V), rtol=1e-9, atol=1e-12)


@SETTINGS
@given(buffers(max_rows=120), st.integers(1, 12))
def test_the_chunks_cover_the_blocks_and_their_log_sum_exps_combine_to_the_whole(case, splits):
    q, K, V, t, block, clean_K, _ = case
    ranges = kn.split_ranges(t, block, splits)
    n = math.ceil(t / block)
    assert ranges[0][0] == 0 and ranges[-1][1] == n and len(ranges) == min(splits, n)
    assert all(a < b for a, b in ranges) and all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
    sizes = [b - a for a, b in ranges]
    assert max(sizes) - min(sizes) <= 1
    parts = [kn.partial_decode(q, K, V, t, block, *r) for r in ranges]
    _, L = kn.combine_partials([p[0] for p in parts], [p[1] for p in parts])
    s = clean_K @ q / math.sqrt(q.shape[0])
    assert math.isclose(L, float(s.max() + np.log(np.exp(s - s.max()).sum())), rel_tol=1e-10, abs_tol=1e-10)


def test_the_combine_of_log_sum_exps_is_exact_on_scores_cut_anywhere():
    rng = np.random.default_rng(5)
    for _ in range(50):
        s = rng.standard_normal(40) * 30
        v = rng.standard_normal((40, 3))
        cuts = sorted(set(rng.integers(1, 40, size=int(rng.integers(0, 6))).tolist()))
        edges = [0] + cuts + [40]
        outs, lses = [], []
        for a, b in zip(edges, edges[1:]):
            w = np.exp(s[a:b] - s[a:b].max())
            outs.append(w @ v[a:b] / w.sum())
            lses.append(float(s[a:b].max() + np.log(w.sum())))
        O, L = kn.combine_partials(outs, lses)
        w = np.exp(s - s.max())
        assert np.allclose(O, w @ v / w.sum(), rtol=1e-12) and math.isclose(L, s.max() + np.log(w.sum()))


def test_split_k_uses_a_given_pool():
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(6)
    K, V, q = rng.standard_normal((500, 8)), rng.standard_normal((500, 8)), rng.standard_normal(8)
    calls = []

    class Counting(ThreadPoolExecutor):
        def map(self, fn, *iterables, **kw):
            calls.append(1)
            return super().map(fn, *iterables, **kw)
    with Counting(2) as pool:
        out, visited = kn.split_k_decode(q, K, V, 480, 32, 4, pool=pool)
    assert calls == [1] and visited == 15
    assert np.allclose(out, attend(q, K[:480], V[:480]), rtol=1e-10)


# ---------------------------------------------------------------- the paged walk


@st.composite
def paged(draw):
    kv_heads = draw(st.integers(1, 3))
    group = draw(st.integers(1, 4))
    block_size = draw(st.sampled_from([1, 2, 3, 4, 16]))
    head_dim = draw(st.integers(1, 6))
    t = draw(st.integers(1, 40))
    needed = math.ceil(t / block_size)
    num_blocks = needed + draw(st.integers(0, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    table = rng.permutation(num_blocks)[:needed].tolist()
    padding = draw(st.integers(0, 3))                      # entries past the sequence: never read
    table = table + [-1] * padding
    K = np.full((num_blocks, kv_heads, block_size, head_dim), np.nan)
    V = np.full((num_blocks, kv_heads, block_size, head_dim), np.inf)
    K_seq = rng.standard_normal((kv_heads, t, head_dim)) * draw(st.sampled_from([1.0, 40.0]))
    V_seq = rng.standard_normal((kv_heads, t, head_dim))
    for i, b in enumerate(table[:needed]):
        rows = slice(i * block_size, min((i + 1) * block_size, t))
        filled = rows.stop - rows.start
        K[b, :, :filled], V[b, :, :filled] = K_seq[:, rows], V_seq[:, rows]
    q = rng.standard_normal((kv_heads * group, head_dim))
    return q, K, V, table, t, K_seq, V_seq, group


@SETTINGS
@given(paged())
def test_the_paged_walk_equals_attention_over_a_contiguous_copy(case):
    q, K, V, table, t, K_seq, V_seq, group = case
    before = (K.copy(), V.copy())
    out, visited = kn.paged_decode(q, K, V, table, t)
    assert visited == math.ceil(t / K.shape[2]) and out.shape == q.shape
    expected = np.array([attend(q[h], K_seq[h // group], V_seq[h // group]) for h in range(q.shape[0])])
    assert np.allclose(out, expected, rtol=1e-9, atol=1e-12)
    assert same(K, before[0]) and same(V, before[1])
    assert np.array_equal(kn.gather_pages(K, table, t), K_seq)
    # one kv head's pages, gathered, through the contiguous kernel: the same numbers
    contiguous, _ = kn.blocked_decode(q[0], kn.gather_pages(K, table, t)[0], kn.gather_pages(V, table, t)[0],
                                      t, K.shape[2])
    assert np.allclose(out[0], contiguous, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- bad input


def raises(match, fn, *args, **kw):
    with pytest.raises(ValueError, match=match):
        fn(*args, **kw)


def test_bad_input_is_refused_with_the_argument_named():
    q, K, V = np.ones(4), np.ones((10, 4)), np.ones((10, 3))
    raises("seq_len must be at least 1", kn.blocked_decode, q, K, V, 0, 4)
    raises("seq_len is 11 but the buffer holds 10", kn.blocked_decode, q, K, V, 11, 4)
    raises("seq_len must be an integer", kn.blocked_decode, q, K, V, 3.0, 4)
    raises("seq_len must be an integer", kn.blocked_decode, q, K, V, True, 4)
    raises("block must be at least 1", kn.blocked_decode, q, K, V, 3, 0)
    raises("block must be at least 1", kn.blocked_decode, q, K, V, 3, -2)
    raises("block must be an integer", kn.blocked_decode, q, K, V, 3, 2.5)
    raises("q must have shape", kn.blocked_decode, np.ones((1, 4)), K, V, 3, 2)
    raises("K_buf has rows of width 5", kn.blocked_decode, q, np.ones((10, 5)), V, 3, 2)
    raises("V_buf has 9 rows but K_buf has 10", kn.blocked_decode, q, K, np.ones((9, 3)), 3, 2)
    raises("K_buf must have shape", kn.blocked_decode, q, np.ones(10), V, 3, 2)
    raises("K_buf has no rows", kn.blocked_decode, q, np.ones((0, 4)), np.ones((0, 3)), 1, 2)
    raises("V_buf must hold real numbers", kn.blocked_decode, q, K, np.ones((10, 3), complex), 3, 2)
    assert kn.blocked_decode(q, K, V, np.int64(3), np.int32(2))[1] == 2        # numpy integers are integers
    raises("Q has 4 rows", kn.blocked_prefill, np.ones((4, 4)), K, V, 3, 2)
    raises("Q must have shape", kn.transposed_prefill, q, K, V, 3, 2)
    raises("splits must be at least 1", kn.split_k_decode, q, K, V, 3, 2, 0)
    raises("workers must be at least 1", kn.split_k_decode, q, K, V, 3, 2, 2, workers=0)
    raises("end_block is 3 but seq_len = 3 fills 2 blocks", kn.partial_decode, q, K, V, 3, 2, 0, 3)
    raises("end_block must be at least 2", kn.partial_decode, q, K, V, 3, 2, 1, 1)
    raises("outputs must be", kn.combine_partials, [np.ones(3)], [0.0, 1.0])
    raises("seq_len must be at least 1", kn.blocks_visited, 0, 3)


def test_bad_paged_input_is_refused_with_the_argument_named():
    K = np.ones((6, 2, 4, 3))
    q = np.ones((4, 3))
    raises(r"seq_len is 5 but block_table holds \(blocks of 4\) 4 positions", kn.paged_decode, q, K, K, [0], 5)
    raises(r"seq_len is 9 but block_table holds \(blocks of 4\) 8", kn.gather_pages, K, [0, 1], 9)
    raises(r"block_table\[1\] is 6, not a block of the pool", kn.paged_decode, q, K, K, [0, 6], 5)
    raises(r"block_table\[0\] is -1", kn.paged_decode, q, K, K, [-1, 2], 5)
    raises(r"block_table\[1\] must be an integer", kn.paged_decode, q, K, K, [0, 1.0], 5)
    raises("block_table names block 2 twice", kn.paged_decode, q, K, K, [2, 2], 5)
    raises("block_table must be a sequence", kn.paged_decode, q, K, K, 3, 5)
    raises("q has 3 heads", kn.paged_decode, np.ones((3, 3)), K, K, [0, 1], 5)
    raises("q has heads of width 2", kn.paged_decode, np.ones((4, 2)), K, K, [0, 1], 5)
    raises("K_pool has shape .* and V_pool", kn.paged_decode, q, K, np.ones((6, 2, 2, 3)), [0, 1], 5)
    raises("K_pool must have shape", kn.paged_decode, q, np.ones((6, 4, 3)), K, [0, 1], 5)
    raises("seq_len must be at least 1", kn.paged_decode, q, K, K, [0, 1], 0)
    # entries past the sequence are not read, so padding is allowed
    assert kn.paged_decode(q, K, K, [3, 1, -1, 99], 5)[1] == 2


# ---------------------------------------------------------------- against PyTorch's own attention


def test_the_kernel_agrees_with_torch_scaled_dot_product_attention():
    """torch.nn.functional.scaled_dot_product_attention, a real implementation written apart:
    the decode step over a buffer's first seq_len rows, a causal chunk (its boolean mask: query i
    sees keys 0 .. t - m + i) and the paged walk with grouped query heads (enable_gqa)."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def T(a):
        return torch.from_numpy(np.ascontiguousarray(a))
    rng = np.random.default_rng(11)
    for _ in range(25):
        N = int(rng.integers(2, 200))
        t, block, d = int(rng.integers(1, N + 1)), int(rng.integers(1, 70)), int(rng.integers(1, 33))
        q, K, V = rng.standard_normal(d) * 3, rng.standard_normal((N, d)) * 3, rng.standard_normal((N, d))
        expected = sdpa(T(q)[None, None, None], T(K[:t])[None, None], T(V[:t])[None, None])[0, 0, 0].numpy()
        K[t:], V[t:] = np.nan, np.inf
        assert np.allclose(kn.blocked_decode(q, K, V, t, block)[0], expected, rtol=1e-10, atol=1e-12)
        m = int(rng.integers(1, t + 1))
        Q = rng.standard_normal((m, d))
        allowed = np.arange(t)[None, :] <= (t - m + np.arange(m))[:, None]          # (m, t)
        chunk = sdpa(T(Q)[None, None], T(K[:t])[None, None], T(V[:t])[None, None], attn_mask=T(allowed))[0, 0].numpy()
        assert np.allclose(kn.blocked_prefill(Q, K, V, t, block)[0], chunk, rtol=1e-10, atol=1e-12)
        assert np.allclose(kn.transposed_prefill(Q, K, V, t, block)[0], chunk, rtol=1e-10, atol=1e-12)
    for kv_heads, group, block_size, t in [(2, 4, 16, 37), (1, 8, 4, 5), (4, 1, 8, 64), (3, 2, 1, 9)]:
        head_dim, needed = 16, math.ceil(t / block_size)
        table = rng.permutation(needed + 3)[:needed].tolist()
        K_pool = rng.standard_normal((needed + 3, kv_heads, block_size, head_dim))
        V_pool = rng.standard_normal((needed + 3, kv_heads, block_size, head_dim))
        q = rng.standard_normal((kv_heads * group, head_dim))
        K_seq, V_seq = kn.gather_pages(K_pool, table, t), kn.gather_pages(V_pool, table, t)
        expected = sdpa(T(q)[None, :, None], T(K_seq)[None], T(V_seq)[None], enable_gqa=True)[0, :, 0].numpy()
        assert np.allclose(kn.paged_decode(q, K_pool, V_pool, table, t)[0], expected, rtol=1e-10, atol=1e-12)
