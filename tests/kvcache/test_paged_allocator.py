"""The block allocator and the paged cache's bookkeeping, against plain models of them.

Two hypothesis state machines: one drives ``BlockAllocator`` alone (allocate, fork, free, a
double free, exhaustion) against a dict of reference counts; the other drives a ``PagedKVCache``
(sequences added, appended to, forked, freed, preempted, reordered) against a list of the key
and value rows each sequence should hold and a count, kept here, of the references each block
should have.  After every step: every invariant the module states, no block handed out twice,
no leak, and every sequence still holds exactly its own rows (a fork and its copy-on-write never
change the other side).
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvcache.cache import CacheFullError
from kvcache.paged import BlockAllocator, OutOfBlocks, PagedKVCache, blocks_for


# ---------------------------------------------------------------------- the allocator alone


def test_allocate_hands_out_every_block_once_then_raises():
    alloc = BlockAllocator(5)
    got = [alloc.allocate() for _ in range(5)]
    assert sorted(got) == [0, 1, 2, 3, 4] and alloc.num_free == 0
    with pytest.raises(OutOfBlocks, match="1 block asked for, 0 free") as err:
        alloc.allocate()
    assert (err.value.asked, err.value.free) == (1, 0)
    assert isinstance(err.value, CacheFullError) and isinstance(err.value, ValueError)
    alloc.check()


def test_free_at_zero_references_returns_the_block_and_double_free_raises():
    alloc = BlockAllocator(3)
    b = alloc.allocate()
    alloc.free(b)
    assert alloc.refcount(b) == 0 and alloc.num_free == 3
    with pytest.raises(ValueError, match="already free"):
        alloc.free(b)
    with pytest.raises(ValueError, match="already free"):
        alloc.free(2)                              # never allocated
    alloc.check()


def test_fork_counts_references_and_the_block_stays_live_until_the_last_goes():
    alloc = BlockAllocator(4)
    b = alloc.allocate()
    assert alloc.fork(b) == b and alloc.fork(b) == b
    assert alloc.refcount(b) == 3 and alloc.num_free == 3 and alloc.num_shared == 1
    alloc.free(b)
    alloc.free(b)
    assert alloc.refcount(b) == 1 and alloc.num_free == 3 and alloc.num_shared == 0
    alloc.free(b)
    assert alloc.num_free == 4
    with pytest.raises(ValueError, match="free"):
        alloc.fork(b)                              # a free block cannot be shared
    alloc.check()


def test_bad_block_numbers_are_refused():
    alloc = BlockAllocator(4)
    for bad in (-1, 4, 2.0, True, "1", None):
        with pytest.raises(ValueError):
            alloc.free(bad)
        with pytest.raises(ValueError):
            alloc.refcount(bad)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError):
            BlockAllocator(bad)


def test_the_free_queue_hands_out_the_least_recently_freed_block_first():
    alloc = BlockAllocator(4)
    a, b, c, d = (alloc.allocate() for _ in range(4))
    alloc.free(c)
    alloc.free(a)
    alloc.free(d)
    assert alloc.free_blocks() == [c, a, d]
    evicted = []
    alloc.on_evict = evicted.append
    assert alloc.allocate() == c and evicted == [c]
    assert alloc.revive(d) == d and alloc.refcount(d) == 1      # taken back, contents and all
    with pytest.raises(ValueError, match="live"):
        alloc.revive(d)
    assert alloc.free_blocks() == [a]
    alloc.check()


def test_allocate_many_takes_all_or_nothing():
    alloc = BlockAllocator(3)
    alloc.allocate()
    with pytest.raises(OutOfBlocks, match="3 blocks asked for, 2 free"):
        alloc.allocate_many(3)
    assert alloc.num_free == 2
    assert len(set(alloc.allocate_many(2))) == 2 and alloc.num_free == 0


def test_out_of_blocks_survives_pickling_with_its_fields():
    err = pickle.loads(pickle.dumps(OutOfBlocks(7, 2, "a step")))
    assert (err.asked, err.free) == (7, 2) and str(err) == "a step: 7 blocks asked for, 2 free"


class AllocatorMachine(RuleBasedStateMachine):
    """BlockAllocator against a dict {block: references}."""

    N = 6

    def __init__(self):
        super().__init__()
        self.alloc = BlockAllocator(self.N)
        self.refs = {b: 0 for b in range(self.N)}

    @rule()
    def allocate(self):
        free = [b for b, n in self.refs.items() if n == 0]
        if not free:
            with pytest.raises(OutOfBlocks):
                self.alloc.allocate()
            return
        b = self.alloc.allocate()
        assert self.refs[b] == 0, f"allocate handed out block {b}, which is live"
        self.refs[b] = 1

    @rule(data=st.data())
    def fork(self, data):
        b = data.draw(st.integers(0, self.N - 1))
        if self.refs[b] == 0:
            with pytest.raises(ValueError):
                self.alloc.fork(b)
        else:
            assert self.alloc.fork(b) == b
            self.refs[b] += 1

    @rule(data=st.data())
    def free(self, data):
        b = data.draw(st.integers(0, self.N - 1))
        if self.refs[b] == 0:
            with pytest.raises(ValueError):
                self.alloc.free(b)
        else:
            self.alloc.free(b)
            self.refs[b] -= 1

    @invariant()
    def agrees(self):
        self.alloc.check()
        assert all(self.alloc.refcount(b) == n for b, n in self.refs.items())
        assert self.alloc.num_free == sum(n == 0 for n in self.refs.values())

    def teardown(self):
        for b, n in self.refs.items():              # every reference dropped: every block free
            for _ in range(n):
                self.alloc.free(b)
        assert self.alloc.num_free == self.N


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# ---------------------------------------------------------------------- the cache's bookkeeping

LAYERS, G, D = 2, 2, 3


class PagedMachine(RuleBasedStateMachine):
    """A PagedKVCache of a small pool against the rows each sequence should hold.

    The reference counts are kept here too, from what each operation means (a new block: one
    reference; a fork: one more for every block of the sequence; a free: one fewer), and compared
    with the allocator's after every step.
    """

    NUM_BLOCKS, BLOCK = 9, 3

    def __init__(self):
        super().__init__()
        self.kv = PagedKVCache(LAYERS, 0, G, D, 40, dtype="float64", compute_dtype=np.float64,
                               block_size=self.BLOCK, num_blocks=self.NUM_BLOCKS)
        self.rows: list[list[np.ndarray]] = []      # per sequence: (layer, n, G, d) keys; values = -keys
        self.refs = [0] * self.NUM_BLOCKS
        self.rng = np.random.default_rng(0)
        self.counter = 0

    def _live(self) -> set:
        return {b for table in self.kv.tables for b in table}

    @rule()
    def add(self):
        self.kv.add_sequence()
        self.rows.append(np.zeros((LAYERS, 0, G, D)))

    @precondition(lambda self: self.kv.batch > 0)
    @rule(data=st.data(), n=st.integers(1, 5))
    def append(self, data, n):
        seq = data.draw(st.integers(0, self.kv.batch - 1))
        self.counter += 1
        new = self.counter + self.rng.standard_normal((LAYERS, n, G, D))
        before = [list(t) for t in self.kv.tables]
        live_before = self._live()
        free_before = self.kv.num_free
        try:
            self.kv.append(seq, list(new), list(-new))
        except OutOfBlocks as err:
            assert err.asked > err.free == free_before
            assert self.kv.tables == before and self.kv.num_free == free_before   # nothing changed
            return
        table = self.kv.tables[seq]
        old = before[seq]
        # copy-on-write: the block of the first new position, when another holder had it
        length = self.rows[seq].shape[1]
        if length % self.BLOCK and table[length // self.BLOCK] != old[length // self.BLOCK]:
            copied = old[length // self.BLOCK]
            assert self.refs[copied] > 1, "a block was copied that nobody else held"
            self.refs[copied] -= 1
            self.refs[table[length // self.BLOCK]] += 1
            assert table[length // self.BLOCK] not in live_before
        else:
            assert table[: len(old)] == old
        for b in table[len(old):]:
            assert b not in live_before, f"block {b} was handed out while live"
            self.refs[b] += 1
        self.rows[seq] = np.concatenate([self.rows[seq], new], axis=1)

    @precondition(lambda self: self.kv.batch > 0)
    @rule(data=st.data())
    def fork(self, data):
        seq = data.draw(st.integers(0, self.kv.batch - 1))
        row = self.kv.fork(seq)
        assert self.kv.tables[row] == self.kv.tables[seq]
        for b in self.kv.tables[seq]:
            self.refs[b] += 1
        self.rows.append(self.rows[seq].copy())

    @precondition(lambda self: self.kv.batch > 0)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.integers(0, self.kv.batch - 1))
        for b in self.kv.tables[seq]:
            self.refs[b] -= 1
        self.kv.free(seq)
        self.rows.pop(seq)

    @precondition(lambda self: self.kv.batch > 0)
    @rule()
    def preempt(self):
        """The newest sequence gives its blocks back (it would be recomputed later)."""
        for b in self.kv.tables[-1]:
            self.refs[b] -= 1
        self.kv.free(self.kv.batch - 1)
        self.rows.pop()

    @precondition(lambda self: self.kv.batch > 0)
    @rule(data=st.data())
    def reorder(self, data):
        idx = data.draw(st.lists(st.integers(0, self.kv.batch - 1), min_size=1, max_size=4))
        for i in idx:
            for b in self.kv.tables[i]:
                self.refs[b] += 1
        for table in self.kv.tables:
            for b in table:
                self.refs[b] -= 1
        self.kv.reorder(idx)
        self.rows = [self.rows[i].copy() for i in idx]

    @rule(n=st.integers(1, 7))
    def recompute_beside(self, n):
        """A sequence computed in a batch of its own on the same pool, then moved into the cache
        (how beam search recomputes a preempted beam)."""
        side = self.kv.new_batch()
        side.add_sequence()
        self.counter += 1
        new = self.counter + self.rng.standard_normal((LAYERS, n, G, D))
        live_before = self._live()
        try:
            side.append(0, list(new), list(-new))
        except OutOfBlocks:
            assert side.tables == [[]]
            return
        self.kv.check()                             # the side batch's blocks are counted too
        assert not set(side.tables[0]) & live_before
        for b in side.tables[0]:
            self.refs[b] += 1
        row = self.kv.adopt(side, 0)
        assert side.batch == 0 and row == self.kv.batch - 1
        self.rows.append(new)

    @invariant()
    def agrees(self):
        kv = self.kv
        kv.check()
        assert [kv.allocator.refcount(b) for b in range(self.NUM_BLOCKS)] == self.refs
        assert kv.num_free == self.NUM_BLOCKS - len(self._live())
        assert list(kv.lengths) == [r.shape[1] for r in self.rows]
        for seq, rows in enumerate(self.rows):
            for layer in range(LAYERS):
                np.testing.assert_array_equal(kv[layer].keys(seq).transpose(1, 0, 2), rows[layer])
                np.testing.assert_array_equal(kv[layer].values(seq).transpose(1, 0, 2), -rows[layer])

    def teardown(self):
        self.kv.release()
        assert self.kv.num_free == self.NUM_BLOCKS, "blocks leaked"
        self.kv.check()


TestPagedMachine = PagedMachine.TestCase
TestPagedMachine.settings = settings(max_examples=120, stateful_step_count=30, deadline=None)


def test_blocks_for_rounds_up():
    assert [blocks_for(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
