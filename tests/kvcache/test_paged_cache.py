"""The paged cache as a KV cache: what it stores and attends to, against a plain reference and
against the contiguous layout; fork and copy-on-write; a step that does not fit changes nothing.

The reference keeps, per sequence, the list of key and value rows appended to it, and computes
attention head by head with loops.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvcache.cache import CacheFullError, ContiguousLayerCache
from kvcache.layouts import new_cache
from kvcache.model import Model
from kvcache.paged import OutOfBlocks, PagedKVCache, PagedLayerCache, blocks_for

G, D_HEAD, H = 2, 4, 4


def reference_attention(q, K, V, start):
    """q (n, H, d) of positions start.. of one sequence, K, V (t, G, d): loops, head by head."""
    out = np.zeros_like(q)
    r = H // G
    for i in range(len(q)):
        seen = start + i + 1
        for h in range(H):
            s = np.array([K[j, h // r] @ q[i, h] for j in range(seen)]) / np.sqrt(D_HEAD)
            w = np.exp(s - s.max())
            out[i, h] = (w / w.sum()) @ V[:seen, h // r]
    return out


class Reference:
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


def paged(batch, max_len=30, block_size=3, num_blocks=None, capacity=None, dtype="float64", layers=1):
    return PagedKVCache(layers, batch, G, D_HEAD, max_len, dtype=dtype, compute_dtype=np.float64,
                        capacity=capacity, block_size=block_size, num_blocks=num_blocks)


def step(kv, ref, rng, counts):
    """One reserved step on every layer: write counts[b] rows to row b, attend, compare."""
    counts = np.asarray(counts)
    N = int(counts.sum())
    k, v, q = rng.standard_normal((N, G, D_HEAD)), rng.standard_normal((N, G, D_HEAD)), \
        rng.standard_normal((N, H, D_HEAD))
    plan = kv.reserve(counts)
    outs = []
    for layer in kv:
        layer.update(k, v, plan)
        outs.append(layer.attend(q, plan))
    ref.update(k, v, counts)
    off = 0
    for b, n in enumerate(counts):
        want = reference_attention(q[off:off + n], ref.k[b], ref.v[b], len(ref.k[b]) - n)
        for out in outs:
            np.testing.assert_allclose(out[off:off + n], want, rtol=1e-11, atol=1e-12)
        off += n
    return k, v, q


def assert_same(kv, ref):
    assert kv.batch == len(ref.k) and list(kv.lengths) == [len(k) for k in ref.k]
    for layer in kv:
        for b in range(kv.batch):
            np.testing.assert_array_equal(layer.keys(b).transpose(1, 0, 2), ref.k[b])
            np.testing.assert_array_equal(layer.values(b).transpose(1, 0, 2), ref.v[b])
    kv.check()


def test_the_pool_has_the_layout_of_the_interface():
    kv = paged(2, max_len=20, block_size=4, layers=3)
    assert kv.num_blocks == 2 * blocks_for(20, 4)              # the default: what contiguous reserves
    for layer in kv:
        assert isinstance(layer, PagedLayerCache)
        assert layer.k_pool.shape == layer.v_pool.shape == (kv.num_blocks, G, 4, D_HEAD)
    assert kv.nbytes == 3 * 2 * kv.num_blocks * G * 4 * D_HEAD * 8
    made = new_cache("paged", n_layers=2, batch=1, kv_heads=G, head_dim=D_HEAD, max_len=10,
                     block_size=5, num_blocks=7)
    assert isinstance(made, PagedKVCache) and made.num_blocks == 7 and made.block_size == 5
    with pytest.raises(TypeError, match="no option 'preempt'"):
        new_cache("paged", n_layers=1, batch=1, kv_heads=G, head_dim=D_HEAD, max_len=10, preempt=True)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="block_size"):
            paged(1, block_size=bad)


def test_a_position_lives_in_its_block_and_slot():
    kv = paged(1, block_size=4, num_blocks=6)
    rng = np.random.default_rng(0)
    k, _, _ = step(kv, Reference(1), rng, [6])
    table = kv.block_table(0)
    assert len(table) == 2
    for p in range(6):
        np.testing.assert_array_equal(kv[0].k_pool[table[p // 4], :, p % 4], k[p])


def test_prefill_then_decode_matches_the_reference_for_several_block_sizes():
    for block_size in (1, 2, 3, 5, 16):
        rng = np.random.default_rng(block_size)
        kv, ref = paged(3, max_len=40, block_size=block_size, layers=2), Reference(3)
        for counts in ([5, 1, 12], [1, 1, 1], [1, 1, 1], [2, 7, 1], [1, 1, 1]):
            step(kv, ref, rng, counts)
            assert_same(kv, ref)


OPS = st.sampled_from(["prefill", "decode", "mixed", "reorder", "select", "crop", "fork", "free"])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_sequence_of_operations_matches_the_reference(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    block_size = data.draw(st.sampled_from([1, 2, 3, 4]))
    batch = data.draw(st.integers(1, 3))
    kv, ref = paged(batch, max_len=24, block_size=block_size, num_blocks=200, capacity=5), Reference(batch)
    for op in data.draw(st.lists(OPS, min_size=1, max_size=10)):
        if kv.batch == 0:
            break
        room = kv.max_len - int(kv.lengths.max())
        if op in ("prefill", "mixed") and room >= 2:
            counts = [data.draw(st.integers(1, min(room, 6))) for _ in range(kv.batch)]
            if op == "mixed":
                counts[0] = 1
            step(kv, ref, rng, counts)
        elif op == "decode" and room >= 1:
            step(kv, ref, rng, [1] * kv.batch)
        elif op == "reorder":
            idx = data.draw(st.lists(st.integers(0, kv.batch - 1), min_size=1, max_size=5))
            kv.reorder(idx)
            ref.gather(idx)
        elif op == "select":
            idx = data.draw(st.lists(st.integers(0, kv.batch - 1), min_size=1, max_size=kv.batch, unique=True))
            kv.select(idx)
            ref.gather(idx)
        elif op == "crop":
            n = data.draw(st.integers(0, int(kv.lengths.max())))
            kv.crop(n)
            ref.crop(n)
        elif op == "fork" and kv.batch < 5:
            seq = data.draw(st.integers(0, kv.batch - 1))
            kv.fork(seq)
            ref.gather(list(range(kv.batch - 1)) + [seq])
        elif op == "free" and kv.batch > 1:
            seq = data.draw(st.integers(0, kv.batch - 1))
            kv.free(seq)
            ref.gather([b for b in range(kv.batch + 1) if b != seq])
        assert_same(kv, ref)
    kv.release()
    assert kv.num_free == kv.num_blocks


def test_equals_the_contiguous_layout_in_every_storage_format():
    for fmt in ("float64", "float32", "float16", "int8"):
        rng = np.random.default_rng(3)
        cont = ContiguousLayerCache(3, G, D_HEAD, 30, dtype=fmt, compute_dtype=np.float64, capacity=4)
        kv = paged(3, max_len=30, block_size=4, capacity=4, dtype=fmt)
        for counts in ([4, 9, 1], [1, 1, 1], [1, 1, 1], [3, 1, 2]):
            counts = np.array(counts)
            k, v = rng.standard_normal((counts.sum(), G, D_HEAD)), rng.standard_normal((counts.sum(), G, D_HEAD))
            q = rng.standard_normal((counts.sum(), H, D_HEAD))
            plan, cont_plan = kv.reserve(counts), cont.reserve(counts)
            kv[0].update(k, v, plan)
            cont.update(k, v, cont_plan)
            np.testing.assert_allclose(kv[0].attend(q, plan), cont.attend(q, cont_plan), rtol=1e-12, atol=1e-13)
        for b in range(3):
            np.testing.assert_array_equal(kv[0].keys(b), cont.keys(b))
        assert kv.used_bytes == cont.used_bytes      # the same positions, the same bytes each
        kv.reorder([2, 2, 0, 1])
        cont.reorder([2, 2, 0, 1])
        q = rng.standard_normal((4, H, D_HEAD))
        k, v = rng.standard_normal((4, G, D_HEAD)), rng.standard_normal((4, G, D_HEAD))
        ones = np.ones(4, np.int64)
        plan, cont_plan = kv.reserve(ones), cont.reserve(ones)
        kv[0].update(k, v, plan)
        cont.update(k, v, cont_plan)
        np.testing.assert_allclose(kv[0].attend(q, plan), cont.attend(q, cont_plan), rtol=1e-12, atol=1e-13)
        # two beams share sequence 2's full blocks: paged holds those positions once
        shared = (int(kv.lengths[0]) - 1) // 4 * 4
        assert kv.used_bytes == cont.used_bytes - shared * kv.pool.bytes_per_slot


def test_fork_shares_every_block_and_copy_on_write_copies_only_the_partial_last_one():
    rng = np.random.default_rng(5)
    kv, ref = paged(1, max_len=40, block_size=4, num_blocks=20, layers=2), Reference(1)
    step(kv, ref, rng, [10])                     # blocks of 4, 4 and 2 positions
    parent = kv.block_table(0)
    child = kv.fork(0)
    ref.gather([0, 0])
    assert kv.block_table(child) == parent and kv.bytes_copied == 0
    assert all(kv.allocator.refcount(b) == 2 for b in parent)
    free_before = kv.num_free
    # the child writes: its partial last block is copied, its full blocks stay shared
    new_k, new_v = rng.standard_normal((1, G, D_HEAD)), rng.standard_normal((1, G, D_HEAD))
    kv.append(child, [new_k, new_k], [new_v, new_v])            # the same rows in both layers
    ref.k[1] = np.concatenate([ref.k[1], new_k])
    ref.v[1] = np.concatenate([ref.v[1], new_v])
    assert_same(kv, ref)                         # the parent holds exactly what it held
    table = kv.block_table(child)
    assert table[:2] == parent[:2] and table[2] != parent[2]
    assert kv.num_free == free_before - 1
    assert kv.bytes_copied == 2 * kv.pool.bytes_per_slot * 2      # 2 positions, 2 layers
    assert kv.allocator.refcount(parent[2]) == 1
    # the parent writes next: its last block is its own now, written in place
    kv.append(0, [new_k, new_k], [new_v, new_v])
    ref.k[0] = np.concatenate([ref.k[0], new_k])
    ref.v[0] = np.concatenate([ref.v[0], new_v])
    assert_same(kv, ref)
    assert kv.block_table(0) == parent
    assert kv.bytes_copied == 2 * kv.pool.bytes_per_slot * 2


def test_beams_share_the_prompt_and_k_beams_copy_k_minus_1_partial_blocks():
    rng = np.random.default_rng(6)
    kv, ref = paged(1, max_len=40, block_size=4, num_blocks=30, capacity=3), Reference(1)
    step(kv, ref, rng, [9])                      # the prompt: 2 full blocks and 1 position
    kv.reorder([0, 0, 0])                        # expand to three beams: references only
    ref.gather([0, 0, 0])
    assert kv.bytes_copied == 0 and kv.num_free == 30 - 3
    assert len({tuple(kv.block_table(b)) for b in range(3)}) == 1
    step(kv, ref, rng, [1, 1, 1])
    assert_same(kv, ref)
    assert kv.bytes_copied == 2 * 1 * kv.pool.bytes_per_slot        # two beams copied 1 position
    assert kv.num_free == 30 - 5
    kv.reorder([1, 1, 2])                        # beam 0 is dropped, beam 1 has two children
    ref.gather([1, 1, 2])
    assert_same(kv, ref)
    assert kv.num_free == 30 - 4


def test_a_step_that_does_not_fit_raises_and_changes_nothing():
    rng = np.random.default_rng(7)
    kv, ref = paged(2, max_len=40, block_size=3, num_blocks=6, capacity=3), Reference(2)
    step(kv, ref, rng, [5, 4])                   # 2 + 2 blocks
    kv.fork(1)
    ref.gather([0, 1, 1])
    snapshot = ([a.copy() for a in kv.pool.k], [list(t) for t in kv.tables], kv.lengths.copy(),
                [kv.allocator.refcount(b) for b in range(6)], kv.num_free)
    with pytest.raises(OutOfBlocks) as err:
        kv.reserve([5, 1, 1])                    # 2 new blocks + a copy of the shared partial one > 2
    assert (err.value.asked, err.value.free) == (3, 2) and "3 blocks asked for, 2 free" in str(err.value)
    assert all(np.array_equal(a, b) for a, b in zip(kv.pool.k, snapshot[0]))
    assert kv.tables == snapshot[1] and np.array_equal(kv.lengths, snapshot[2])
    assert [kv.allocator.refcount(b) for b in range(6)] == snapshot[3] and kv.num_free == snapshot[4]
    assert_same(kv, ref)
    with pytest.raises(CacheFullError, match="max_len"):
        kv.reserve([36, 1, 1])
    step(kv, ref, rng, [1, 1, 1])                # what fits still works: 1 copy + 0 new + 0 new
    assert_same(kv, ref)


def test_crop_frees_the_blocks_it_empties():
    rng = np.random.default_rng(8)
    kv, ref = paged(2, max_len=30, block_size=3, num_blocks=12), Reference(2)
    step(kv, ref, rng, [10, 7])
    kv.crop(np.array([4, 7]))
    ref.crop(np.array([4, 7]))
    assert [len(kv.block_table(b)) for b in range(2)] == [2, 3] and kv.num_free == 12 - 5
    step(kv, ref, rng, [3, 1])
    assert_same(kv, ref)


def test_a_layer_rearranges_the_whole_cache_because_the_tables_are_shared():
    rng = np.random.default_rng(9)
    kv, ref = paged(2, block_size=2, layers=3, capacity=3), Reference(2)
    step(kv, ref, rng, [3, 5])
    kv[1].reorder([1, 0, 1])
    ref.gather([1, 0, 1])
    assert_same(kv, ref)                         # every layer moved, once
    with pytest.raises(TypeError, match="copy the PagedKVCache"):
        kv[0].copy()
    twin = kv.copy()
    k = rng.standard_normal((3, 1, G, D_HEAD))
    twin.append(0, [k[0]] * 3, [k[0]] * 3)       # writing the copy leaves the original alone
    assert_same(kv, ref)
    assert twin.pool is not kv.pool and list(twin.lengths) == [6, 3, 5]


def test_the_engine_model_gives_the_same_logits_on_either_layout():
    cfg = dict(vocab_size=40, hidden_size=24, intermediate_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = Model.random(cfg, seed=2, dtype=np.float64)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 40, n) for n in (1, 7, 16, 3)]
    cont, pg = model.new_cache(4, 40, capacity=5), model.new_cache(4, 40, kind="paged", capacity=5, block_size=4)
    a, b = model.prefill(prompts, cont), model.prefill(prompts, pg)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for idx in (None, [3, 3, 0, 1, 2], None, [4, 0], None):
        if idx is not None:
            cont.reorder(idx) if len(idx) > 2 else cont.select(idx)
            pg.reorder(idx) if len(idx) > 2 else pg.select(idx)
        tokens = rng.integers(0, 40, cont.batch)
        np.testing.assert_allclose(model.decode(tokens, cont), model.decode(tokens, pg), rtol=1e-12, atol=1e-12)
    pg.check()
    np.testing.assert_allclose(cont.as_dicts()[1]["k"], pg.as_dicts()[1]["k"])


def test_decode_attention_equals_the_kernel_s_paged_walk():
    """The cache gathers each sequence's blocks (one np.take for the batch) and attends with the
    engine's decode_attention; chapter 8's kernel walks the same pool block by block through the
    block table, with an online softmax.  Two computations of one thing: equal, for grouped and
    plain heads, several block sizes, and beams that share blocks."""
    from kvcache.kernel import paged_decode
    for heads, kv_heads, block_size in ((4, 2, 4), (3, 3, 1), (8, 1, 16), (4, 4, 5)):
        rng = np.random.default_rng(heads * 10 + block_size)
        d = 6
        kv = PagedKVCache(2, 3, kv_heads, d, 60, dtype="float64", compute_dtype=np.float64,
                          block_size=block_size, capacity=5)
        counts = np.array([17, 1, 33])
        plan = kv.reserve(counts)
        for layer in kv:
            layer.update(rng.standard_normal((51, kv_heads, d)), rng.standard_normal((51, kv_heads, d)), plan)
        kv.reorder([0, 2, 2, 1, 0])                  # beams sharing blocks
        ones = np.ones(5, np.int64)
        plan = kv.reserve(ones)
        q = rng.standard_normal((5, heads, d))
        for layer in kv:
            layer.update(rng.standard_normal((5, kv_heads, d)), rng.standard_normal((5, kv_heads, d)), plan)
            ours = layer.attend(q, plan)
            for b in range(5):
                walked, visited = paged_decode(q[b], layer.k_pool, layer.v_pool, kv.block_table(b),
                                               int(kv.lengths[b]))
                assert visited == blocks_for(int(kv.lengths[b]), block_size)
                np.testing.assert_allclose(ours[b], walked, rtol=1e-12, atol=1e-13)


def test_a_refused_step_counts_its_sequences_in_words():
    """One sequence is "1 sequence", two are "2 sequences"."""
    for batch, words in ((1, "over 1 sequence:"), (2, "over 2 sequences:")):
        kv = paged(batch, max_len=30, block_size=3, num_blocks=2)
        with pytest.raises(OutOfBlocks) as refused:
            kv.reserve([7] * batch)
        assert words in str(refused.value), str(refused.value)
