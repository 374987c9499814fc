"""The KV cache on its own: what it stores, how rows move, what each storage format costs.

The reference is a plain list per sequence of the key and value rows appended to it, and an
attention written head by head with loops (no grouping trick, no masks).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvcache.cache import CacheFullError, ContiguousLayerCache, KVCache
from kvcache.layouts import CACHE_KINDS, new_cache
from kvcache.cache_dtypes import cache_dtype, dequantize_rows, quantize_rows
from kvcache.model import Model

G, D_HEAD, H = 2, 8, 4


def rows(rng, n):
    return rng.standard_normal((n, G, D_HEAD))


def reference_attention(q, K, V, start):
    """q (n, H, d) of positions start.., K, V (t, G, d) of one sequence: loops, head by head."""
    n, t = len(q), len(K)
    out = np.zeros_like(q)
    r = H // G
    for i in range(n):
        seen = start + i + 1
        for h in range(H):
            g = h // r
            s = np.array([K[j, g] @ q[i, h] for j in range(seen)]) / np.sqrt(D_HEAD)
            w = np.exp(s - s.max())
            w /= w.sum()
            out[i, h] = sum(w[j] * V[j, g] for j in range(seen))
    assert seen <= t
    return out


class Reference:
    """What the cache should hold: a list of (k rows, v rows) per sequence."""

    def __init__(self, batch):
        self.k = [np.zeros((0, G, D_HEAD)) for _ in range(batch)]
        self.v = [np.zeros((0, G, D_HEAD)) for _ in range(batch)]

    def update(self, k, v, counts):
        off = 0
        for b, n in enumerate(counts):
            self.k[b] = np.concatenate([self.k[b], k[off:off + n]])
            self.v[b] = np.concatenate([self.v[b], v[off:off + n]])
            off += n

    def gather(self, idx):
        self.k = [self.k[i].copy() for i in idx]
        self.v = [self.v[i].copy() for i in idx]

    def crop(self, n):
        n = np.broadcast_to(n, (len(self.k),))
        self.k = [k[:m] for k, m in zip(self.k, n)]
        self.v = [v[:m] for v, m in zip(self.v, n)]


def assert_same(cache: ContiguousLayerCache, ref: Reference):
    assert cache.batch == len(ref.k)
    assert list(cache.lengths) == [len(k) for k in ref.k]
    for b in range(cache.batch):
        np.testing.assert_array_equal(cache.keys(b).transpose(1, 0, 2), ref.k[b])
        np.testing.assert_array_equal(cache.values(b).transpose(1, 0, 2), ref.v[b])


def test_prefill_then_decode_stores_and_attends_like_the_reference():
    rng = np.random.default_rng(0)
    cache = ContiguousLayerCache(3, G, D_HEAD, 20, dtype="float64", compute_dtype=np.float64)
    ref = Reference(3)
    for counts in ([5, 1, 12], [1, 1, 1], [1, 1, 1], [2, 7, 1]):
        counts = np.array(counts)
        k, v, q = rows(rng, counts.sum()), rows(rng, counts.sum()), rng.standard_normal((counts.sum(), H, D_HEAD))
        plan = cache.reserve(counts)
        cache.update(k, v, plan)
        ref.update(k, v, counts)
        assert_same(cache, ref)
        got = cache.attend(q, plan)
        off = 0
        for b, n in enumerate(counts):
            want = reference_attention(q[off:off + n], ref.k[b], ref.v[b], len(ref.k[b]) - n)
            np.testing.assert_allclose(got[off:off + n], want, rtol=1e-12, atol=1e-12)
            off += n


def test_stale_rows_beyond_a_length_change_nothing():
    """After crop, the old rows stay in the buffer: attention must not see them."""
    rng = np.random.default_rng(1)
    cache = ContiguousLayerCache(2, G, D_HEAD, 16, dtype="float64", compute_dtype=np.float64)
    cache.update(rows(rng, 20), rows(rng, 20), cache.reserve(np.array([10, 10])))
    kept = [cache.keys(b)[:, :4] for b in range(2)], [cache.values(b)[:, :4] for b in range(2)]
    cache.crop(np.array([4, 9]))
    cache.k[0, :, 4:10] = 1e6                 # garbage where row 0 no longer holds anything
    q = rng.standard_normal((2, H, D_HEAD))
    k1, v1 = rows(rng, 2), rows(rng, 2)
    plan = cache.reserve(np.array([1, 1]))
    cache.update(k1, v1, plan)
    out = cache.attend(q, plan)
    K0 = np.concatenate([kept[0][0].transpose(1, 0, 2), k1[:1]])
    V0 = np.concatenate([kept[1][0].transpose(1, 0, 2), v1[:1]])
    np.testing.assert_allclose(out[0], reference_attention(q[:1], K0, V0, 4)[0], rtol=1e-12)


OPS = st.sampled_from(["prefill", "decode", "reorder", "select", "crop"])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_sequence_of_operations_matches_the_reference(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    capacity = data.draw(st.integers(1, 4))
    batch = data.draw(st.integers(1, capacity))
    max_len = 24
    cache = ContiguousLayerCache(batch, G, D_HEAD, max_len, dtype="float64", compute_dtype=np.float64,
                                 capacity=capacity)
    ref = Reference(batch)
    for op in data.draw(st.lists(OPS, min_size=1, max_size=8)):
        B = cache.batch
        room = max_len - np.asarray(cache.lengths)
        if op in ("prefill", "decode"):
            counts = np.ones(B, np.int64) if op == "decode" else \
                np.array([data.draw(st.integers(1, 5)) for _ in range(B)])
            if (counts > room).any():
                continue
            k, v = rows(rng, counts.sum()), rows(rng, counts.sum())
            cache.update(k, v, cache.reserve(counts))
            ref.update(k, v, counts)
        elif op == "reorder":
            idx = data.draw(st.lists(st.integers(0, B - 1), min_size=1, max_size=capacity))
            cache.reorder(idx)
            ref.gather(idx)
        elif op == "select":
            idx = data.draw(st.permutations(range(B)))[: data.draw(st.integers(1, B))]
            cache.select(idx)
            ref.gather(idx)
        else:
            n = data.draw(st.integers(0, max_len))
            cache.crop(n)
            ref.crop(n)
        assert_same(cache, ref)


def test_reorder_with_repeated_parents_makes_independent_copies():
    rng = np.random.default_rng(2)
    cache = ContiguousLayerCache(1, G, D_HEAD, 10, dtype="float64", compute_dtype=np.float64, capacity=3)
    cache.update(rows(rng, 4), rows(rng, 4), cache.reserve(np.array([4])))
    parent = cache.keys(0)
    cache.reorder([0, 0, 0])                                  # expand one prompt to three beams
    assert cache.batch == 3 and list(cache.lengths) == [4, 4, 4]
    new = rows(rng, 3)
    cache.update(new, rows(rng, 3), cache.reserve(np.array([1, 1, 1])))      # each beam writes its own row
    for b in range(3):
        np.testing.assert_array_equal(cache.keys(b)[:, :4], parent)
        np.testing.assert_array_equal(cache.keys(b)[:, 4], new[b])
    cache.k[1, :, :4] = 0.0                                   # writing one row ...
    np.testing.assert_array_equal(cache.keys(0)[:, :4], parent)   # ... leaves the others alone
    np.testing.assert_array_equal(cache.keys(2)[:, :4], parent)


def test_reorder_copies_only_the_rows_that_change():
    rng = np.random.default_rng(3)
    kv = new_cache("contiguous", n_layers=2, batch=1, kv_heads=G, head_dim=D_HEAD, max_len=16,
                   dtype="float32", compute_dtype=np.float32, capacity=4)
    for layer in kv:
        layer.update(rows(rng, 5), rows(rng, 5), layer.reserve(np.array([5])))
    per_position = 2 * 2 * G * D_HEAD * 4                    # keys and values, 2 layers, float32
    kv.reorder([0, 0, 0, 0])                                  # the expansion: 3 new rows of 5 positions
    assert kv.bytes_copied == 3 * 5 * per_position
    kv.reorder([0, 1, 2, 3])                                  # every row its own parent: nothing moves
    assert kv.bytes_copied == 3 * 5 * per_position
    kv.reorder([0, 0, 2, 2])                                  # rows 1 and 3 change
    assert kv.bytes_copied == 5 * 5 * per_position


def test_bad_indices_and_lengths_are_refused():
    cache = ContiguousLayerCache(2, G, D_HEAD, 8, capacity=3)
    with pytest.raises(ValueError, match="beam index 2 is out of range"):
        cache.reorder([0, 2])
    with pytest.raises(ValueError, match="room for 1 to 3"):
        cache.reorder([0, 1, 0, 1])
    with pytest.raises(ValueError, match="distinct rows"):
        cache.select([1, 1])
    with pytest.raises(ValueError, match="integers"):
        cache.select([0.5])
    with pytest.raises(ValueError, match="crop takes"):
        cache.crop(-1)
    with pytest.raises(ValueError, match="crop takes"):
        cache.crop([1, 2, 3])
    with pytest.raises(ValueError, match="no cache layout 'paged-ish'"):
        new_cache("paged-ish")
    with pytest.raises(ValueError, match="cache dtype 'float8' is not one of"):
        ContiguousLayerCache(1, G, D_HEAD, 8, dtype="float8")


def test_lengths_cannot_be_written_through_the_property():
    cache = ContiguousLayerCache(2, G, D_HEAD, 8)
    with pytest.raises(ValueError):
        cache.lengths[0] = 5


def test_copy_is_independent():
    rng = np.random.default_rng(4)
    kv = new_cache("contiguous", n_layers=1, batch=2, kv_heads=G, head_dim=D_HEAD, max_len=8)
    kv[0].update(rows(rng, 4), rows(rng, 4), kv.reserve(np.array([2, 2])))
    snapshot = kv.copy()
    before = snapshot.as_dicts()
    kv.reorder([1, 1])
    kv[0].update(rows(rng, 2), rows(rng, 2), kv.reserve(np.array([1, 1])))
    kv.crop(1)
    after = snapshot.as_dicts()
    assert list(snapshot.lengths) == [2, 2]
    np.testing.assert_array_equal(after[0]["k"], before[0]["k"])
    np.testing.assert_array_equal(after[0]["v"], before[0]["v"])


# ---------------------------------------------------------------------- a whole model's cache


CONFIG = dict(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def snapshot(kv: KVCache):
    return list(kv.lengths), kv.as_dicts()


def assert_unchanged(kv, before):
    lengths, dicts = snapshot(kv)
    assert lengths == before[0]
    for a, b in zip(dicts, before[1]):
        np.testing.assert_array_equal(a["k"], b["k"])
        np.testing.assert_array_equal(a["v"], b["v"])


def test_a_step_that_does_not_fit_writes_nothing():
    model = Model.random(CONFIG, seed=0)
    kv = model.new_cache(2, max_len=6)
    model.prefill([[1, 2, 3], [4, 5, 6, 7, 8]], kv)
    model.decode([1, 2], kv)                                  # sequence 1 now holds 6 = max_len
    before = snapshot(kv)
    with pytest.raises(CacheFullError, match="sequence 1 holds 6 tokens: 1 more would pass the cache's max_len of 6"):
        model.decode([1, 2], kv)
    assert_unchanged(kv, before)


def test_bad_tokens_write_nothing():
    model = Model.random(CONFIG, seed=0)
    kv = model.new_cache(2, max_len=10)
    model.prefill([[1, 2, 3], [4, 5]], kv)
    before = snapshot(kv)
    with pytest.raises(ValueError, match="token id 50 at position 1 is outside the vocabulary"):
        model.decode([1, 50], kv)
    with pytest.raises(ValueError, match="token id -1 at position 0"):
        model.decode([-1, 3], kv)
    with pytest.raises(ValueError, match="3 tokens given for counts summing to 2"):
        model.forward([1, 2, 3], [1, 1], kv)
    with pytest.raises(ValueError, match="one count >= 1 per sequence"):
        model.forward([1], [1, 0], kv)
    with pytest.raises(ValueError, match="integers"):
        model.decode([1.5, 2.0], kv)
    assert_unchanged(kv, before)


def test_a_model_cache_is_sized_as_the_formula_says():
    model = Model.random(CONFIG, seed=0)
    L, Gm, d = 2, 2, 4                                     # layers, kv heads, head_dim = 16 / 4
    for dtype, per_row in (("float64", 8 * d), ("float32", 4 * d), ("float16", 2 * d), ("int8", d + 4)):
        kv = model.new_cache(3, max_len=10, dtype=dtype)
        assert kv.dtype == dtype
        assert kv.nbytes == 2 * L * 3 * Gm * 10 * per_row
        model.prefill([[1], [2, 3], [4, 5, 6]], kv)
        assert kv.used_bytes == 2 * L * (1 + 2 + 3) * Gm * per_row


def test_known_layouts():
    assert "contiguous" in CACHE_KINDS


# ---------------------------------------------------------------------- storage formats and their error


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**16), st.floats(1e-3, 1e3))
def test_int8_rows_are_within_half_a_step_of_their_largest_entry(seed, scale):
    x = np.random.default_rng(seed).standard_normal((5, 3, 16)) * scale
    q, s = quantize_rows(x)
    assert q.dtype == np.int8 and s.shape == (5, 3) and np.abs(q).max() <= 127
    back = dequantize_rows(q, s, np.float64)
    bound = np.abs(x).max(axis=-1, keepdims=True) / 254
    assert np.all(np.abs(back - x) <= bound * (1 + 1e-6))
    assert np.all(np.abs(q).max(axis=-1) == 127)             # the largest entry uses the full range


def test_int8_zero_rows_stay_zero():
    q, s = quantize_rows(np.zeros((2, 4)))
    assert np.all(q == 0) and np.all(s == 0)
    assert np.all(dequantize_rows(q, s, np.float32) == 0)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**16))
def test_float16_rows_are_within_half_an_ulp(seed):
    x = np.random.default_rng(seed).standard_normal((4, 32)) * 10
    fmt = cache_dtype("float16")
    data, scale = fmt.encode(x)
    assert scale is None and data.dtype == np.float16
    back = fmt.decode(data, scale, np.float64)
    big = np.abs(x) > 2.0 ** -14                              # normal float16 numbers
    assert np.all(np.abs(back - x)[big] <= np.abs(x)[big] * 2.0 ** -11)


def test_cheaper_formats_cost_bounded_logit_error():
    """Decode logits with each cache format against the exact float64 ones (the bench measures
    the same on a bigger model): small for float16, larger but bounded for int8, and in order."""
    model = Model.random(dict(CONFIG, hidden_size=64, num_attention_heads=4, num_key_value_heads=2), seed=1,
                         dtype=np.float64)
    prompts = [list(range(1, 30)), list(range(7, 20))]
    errors = {}
    for dtype in ("float64", "float32", "float16", "int8"):
        kv = model.new_cache(2, max_len=40, dtype=dtype)
        model.prefill(prompts, kv)
        errors[dtype] = model.decode([3, 4], kv)
    exact = errors.pop("float64")
    spread = exact.std()
    rel = {k: np.abs(v - exact).max() / spread for k, v in errors.items()}
    assert rel["float32"] < 1e-5
    assert 1e-5 < rel["float16"] < 1e-2
    assert rel["float16"] < rel["int8"] < 0.1


def test_what_the_cache_hands_out_are_copies():
    """keys(), values() and as_dicts() say they return new arrays: writing them changes nothing."""
    rng = np.random.default_rng(5)
    kv = new_cache("contiguous", n_layers=2, batch=2, kv_heads=G, head_dim=D_HEAD, max_len=8,
                   dtype="float64", compute_dtype=np.float64)
    for layer in kv:
        layer.update(rows(rng, 5), rows(rng, 5), layer.reserve(np.array([3, 2])))
    before = snapshot(kv)
    kv[0].keys(0)[:] = 7.0
    kv[1].values(1)[:] = 7.0
    for entry in kv.as_dicts():
        entry["k"][:] = 7.0
        entry["v"][:] = 7.0
    assert_unchanged(kv, before)


def test_refusals_print_plain_numbers():
    """A refusal names its rows as Python writes them ([1, 1]), never numpy's reprs
    ([np.int64(1), np.int64(1)]), whatever type the rows came in."""
    cache = ContiguousLayerCache(2, G, D_HEAD, 8, capacity=3)
    with pytest.raises(ValueError) as refused:
        cache.select(np.array([1, 1]))
    assert str(refused.value) == "select takes distinct rows, got [1, 1] (reorder repeats rows)"
