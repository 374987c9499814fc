"""One plan per step: what ``reserve`` returns, what the layers receive, and the cache interface
every layout implements.

A plan is computed once and frozen; the contiguous and the paged layouts must agree on its
common fields for the same step, and the paged plan's slots must be where the block tables say
each position lives.
"""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from kvcache.cache import ContiguousLayerCache, LayerCache, StepPlan
from kvcache.layouts import new_cache
from kvcache.paged import PagedKVCache, PagedLayerCache
from kvcache.plan import plan_step

G, D_HEAD = 2, 4

# every member the interface's docstrings describe (kvcache.cache's module doc)
INTERFACE = {"batch", "capacity", "max_len", "lengths", "reserve", "update", "attend", "reorder", "select",
             "crop", "keys", "values", "copy", "nbytes", "used_bytes", "bytes_copied"}


def test_every_member_of_the_interface_is_abstract():
    assert set(LayerCache.__abstractmethods__) == INTERFACE
    with pytest.raises(TypeError, match="abstract"):
        LayerCache()
    members = {name: getattr(LayerCache, name) for name in INTERFACE}
    assert all(inspect.getdoc(m) for m in members.values()), "every member says what it does"


def test_a_layout_that_leaves_out_one_member_cannot_be_made():
    for missing in sorted(INTERFACE):
        body = {name: (property(lambda self: 0) if isinstance(getattr(LayerCache, name), property)
                       else (lambda self, *a: None)) for name in INTERFACE - {missing}}
        partial = type(f"Without_{missing}", (LayerCache,), body)
        with pytest.raises(TypeError, match=missing):
            partial()
    complete = type("Complete", (LayerCache,), {name: property(lambda self: 0)
                                                 if isinstance(getattr(LayerCache, name), property)
                                                 else (lambda self, *a: None) for name in INTERFACE})
    complete()


def test_both_layers_implement_the_interface():
    for cls in (ContiguousLayerCache, PagedLayerCache):
        assert issubclass(cls, LayerCache) and not cls.__abstractmethods__


def test_a_plan_is_frozen_and_its_arrays_cannot_be_written():
    plan = plan_step(np.array([3, 1, 2]), np.array([0, 5, 7]))
    assert plan.counts.tolist() == [3, 1, 2] and plan.starts.tolist() == [0, 5, 7]
    assert plan.ends.tolist() == [3, 6, 9] and plan.offsets.tolist() == [0, 3, 4, 6]
    assert plan.positions.tolist() == [0, 1, 2, 5, 7, 8]
    assert (plan.batch, plan.tokens, plan.context, plan.is_decode) == (3, 6, 9, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.is_decode = True
    for name in ("counts", "starts", "ends", "offsets", "positions"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(plan, name)[0] = 1


def test_decode_is_decided_once_every_count_being_one():
    decode = plan_step(np.array([1, 1, 1]), np.array([4, 0, 9]))
    assert decode.is_decode and decode.positions.tolist() == [4, 0, 9] and decode.tokens == 3
    assert not plan_step(np.array([1, 2]), np.array([4, 0])).is_decode
    assert not plan_step(np.array([2]), np.array([0])).is_decode      # one row, two tokens: a prefill
    assert plan_step(np.array([1]), np.array([0])).is_decode
    empty = plan_step(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert not empty.is_decode and empty.tokens == 0 and empty.context == 0


def test_reserving_a_step_changes_nothing_that_a_plan_holds():
    starts = np.array([2, 0])
    plan = plan_step(np.array([1, 3]), starts)
    starts[0] = 99
    assert plan.starts.tolist() == [2, 0] and plan.positions.tolist() == [2, 0, 1, 2]


def test_the_two_layouts_plan_a_step_alike():
    contiguous = new_cache("contiguous", n_layers=2, batch=3, kv_heads=G, head_dim=D_HEAD, max_len=20)
    paged = PagedKVCache(2, 3, G, D_HEAD, 20, block_size=4)
    rng = np.random.default_rng(0)
    for counts in ([5, 1, 7], [1, 1, 1], [2, 1, 1], [1, 1, 1]):
        plans = []
        for kv in (contiguous, paged):
            plan = kv.reserve(np.array(counts))
            k = rng.standard_normal((plan.tokens, G, D_HEAD)).astype(np.float32)
            for layer in kv:
                layer.update(k, k, plan)
            plans.append(plan)
        a, b = plans
        for name in ("counts", "starts", "ends", "offsets", "positions"):
            assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
        assert a.is_decode == b.is_decode == all(c == 1 for c in counts)
        assert a.slot_blocks is None and a.table is None
        assert list(contiguous.lengths) == list(paged.lengths) == b.ends.tolist()


def test_the_paged_plan_puts_each_position_where_its_table_says():
    kv = PagedKVCache(1, 3, G, D_HEAD, 40, block_size=4)
    kv.reserve(np.array([6, 1, 9]))
    for counts in ([3, 1, 4], [1, 1, 1]):
        plan = kv.reserve(np.array(counts))
        tables = kv.block_tables
        for i, (row, pos) in enumerate(zip(np.repeat(np.arange(3), counts), plan.positions)):
            assert plan.slot_blocks[i] == tables[row][pos // 4] and plan.slot_offsets[i] == pos % 4
        width = -(-plan.context // 4)
        assert plan.table.shape == (3, width)
        for row, table in enumerate(tables):
            assert plan.table[row, : len(table)].tolist() == table[:width]
        assert kv.lengths.tolist() == plan.ends.tolist()        # the step's positions are held from here


def test_a_layer_refuses_a_plan_it_cannot_write():
    paged = PagedKVCache(1, 2, G, D_HEAD, 10, block_size=4)
    contiguous = ContiguousLayerCache(2, G, D_HEAD, 10)
    k = np.zeros((2, G, D_HEAD), np.float32)
    with pytest.raises(TypeError, match="PagedKVCache.reserve"):
        paged[0].update(k, k, contiguous.reserve(np.array([1, 1])))
    assert isinstance(paged[0].reserve(np.array([1, 1])), StepPlan)       # a layer reserves for its batch
    assert paged.lengths.tolist() == [1, 1]


def test_a_plan_reserved_before_the_rows_changed_is_refused_before_it_writes():
    rng = np.random.default_rng(3)
    for kv in (new_cache("contiguous", n_layers=1, batch=2, kv_heads=G, head_dim=D_HEAD, max_len=12, capacity=3),
               PagedKVCache(1, 2, G, D_HEAD, 12, block_size=4, capacity=3)):
        k = rng.standard_normal((5, G, D_HEAD)).astype(np.float32)
        first = kv.reserve(np.array([3, 2]))
        kv[0].update(k, k, first)
        stale = kv.reserve(np.array([1, 1]))
        kv.reorder([1, 0, 0])                             # the rows changed after the plan was made
        before = [kv[0].keys(b) for b in range(kv.batch)]
        with pytest.raises(ValueError, match="reserve the step again"):
            kv[0].update(k[:2], k[:2], stale)
        with pytest.raises(ValueError, match="reserve the step again"):
            kv[0].attend(np.zeros((2, 4, D_HEAD), np.float32), stale)
        assert all(np.array_equal(a, kv[0].keys(b)) for b, a in enumerate(before))       # nothing written
        with pytest.raises(TypeError, match="StepPlan"):
            kv[0].attend(np.zeros((2, 4, D_HEAD), np.float32), np.array([1, 1]))
