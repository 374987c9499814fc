"""A paged KV cache: fixed-size blocks from one pool, block tables, reference counts, copy-on-write.

A contiguous cache reserves L_max positions for every sequence whether it uses them or not.  A
paged cache cuts memory into blocks of ``block_size`` positions and hands a sequence one block
at a time, as it grows, from a pool shared by every sequence (vLLM's PagedAttention).

Layout, per layer::

    k_pool, v_pool   [num_blocks, kv_heads, block_size, head_dim]     (int8 adds scales
                     [num_blocks, kv_heads, block_size])

held in memory block by block, positions before heads ([num_blocks, block_size, kv_heads,
head_dim], the order of vLLM's FlashAttention layout; ``k_pool`` is that memory seen in the
order above).  That way the blocks of a sequence, gathered in table order, are at once one
array of positions (T, kv_heads, head_dim): attention reads it without another copy.

Attention gathers the blocks of every sequence of a decode step with one ``np.take`` and runs the
engine's ``decode_attention`` on the result.  Chapter 8's kernel (``kvcache.kernel.paged_decode``)
walks the same pool through a block table with an online softmax and copies nothing; it is the
form a GPU kernel takes, but in numpy it is a Python loop per sequence and per block, several
times slower than one gather and two matrix products (``bench_paged`` measures both), so the
cache gathers, and its tests hold the two equal.

and per sequence, shared by all layers (block b of the pool is block b in every layer)::

    table    [t_0, t_1, ...]        position p lives in block table[p // block_size],
                                    slot p % block_size
    length   positions cached       the table holds ceil(length / block_size) blocks or more

Blocks are handed out by a ``BlockAllocator`` that counts references: a block is free (on the free
queue, count 0) or live (count >= 1), never both.  ``fork(seq)`` gives a new sequence the same
table, one more reference to every block and no copy; the two share everything until one of them
writes into a block another still references: then that block alone is copied (copy-on-write),
which only ever happens to a partly filled last block (full blocks are never written again).
Beam search reorders beams by moving table entries, not keys and values.

Invariants (``BlockAllocator.check`` and ``PagedKVCache.check`` verify them; the tests call both
after every operation of a random sequence of them):

1. every block of the pool is exactly one of: free (on the free queue, reference count 0) or
   live (count >= 1);  ``num_free`` = the length of the free queue;
2. ``allocate`` only hands out a free block, so no live block is ever handed out twice;
3. the reference count of a block = the number of block-table entries, over every sequence of
   every batch on the pool, that name it (plus the references a caller holds explicitly,
   ``pinned``);
4. no table names a block twice; a table holds at least ceil(length / block_size) blocks and at
   most ceil(max_len / block_size);
5. a write goes only to a block whose count is 1 (shared blocks are copied first), so a write to
   one sequence never changes another.

A step starts with ``reserve(counts)``: it takes the blocks the step needs (copying a shared
partial block first), and returns the step's plan (``kvcache.plan.StepPlan``) with the block and
slot of every new position and the padded block tables attention gathers with; every layer
writes and reads through that plan.  When a step needs more free blocks than there are,
``reserve`` raises ``OutOfBlocks`` (how many were asked for, how many are free) before anything
is written or allocated.  What to do then (preempt a sequence and recompute it later, or refuse)
is the scheduler's decision (``kvcache.serving``, ``kvcache.generate``).
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Callable, Iterable

import numpy as np

from . import validate
from .cache import (CacheFullError, KVCache, LayerCache, check_crop, check_plan, check_reorder,
                    check_room, check_select, kv_bytes)
from .cache_dtypes import CacheDtype, cache_dtype
from .gqa import attend_new_tokens, decode_attention
from .plan import StepPlan, plan_step
from .quantized import packed_width
from .quantized_blocks import QuantizedBlocks

__all__ = ["OutOfBlocks", "BlockAllocator", "BlockPool", "PagedKVCache", "PagedLayerCache",
           "blocks_for", "DEFAULT_BLOCK_SIZE"]

DEFAULT_BLOCK_SIZE = 16


def blocks_for(positions: int, block_size: int) -> int:
    """Blocks that hold ``positions`` positions: ceil(positions / block_size)."""
    return -(-int(positions) // int(block_size))


class OutOfBlocks(CacheFullError):
    """The pool has fewer free blocks than a step needs; nothing was written or allocated.

    ``asked``: blocks the step needed; ``free``: blocks free when it asked.
    """

    def __init__(self, asked: int, free: int, what: str = ""):
        self.asked, self.free, self.what = int(asked), int(free), what
        head = f"{what}: " if what else ""
        super().__init__(f"{head}{self.asked} block{'s' * (self.asked != 1)} asked for, "
                         f"{self.free} free")

    def __reduce__(self):            # picklable with its fields (a worker process may raise it)
        return (type(self), (self.asked, self.free, self.what))


def _block_number(block, num_blocks: int) -> int:
    if not validate.is_whole(block):
        raise ValueError(f"a block is an integer from 0 to {num_blocks - 1}, got {block!r}")
    if not 0 <= int(block) < num_blocks:
        raise ValueError(f"block {int(block)} is not in the pool (0 to {num_blocks - 1})")
    return int(block)


# ---------------------------------------------------------------------- the allocator


class BlockAllocator:
    """Reference-counted blocks 0 .. num_blocks - 1 with a free queue.

    The free queue is ordered for eviction: ``allocate`` takes the block at its front, and a block
    whose last reference goes is put at its back.  A freed block keeps its contents until it is
    handed out again, so a cache of block contents (``kvcache.prefix``) can take it back with
    ``revive`` in the meantime; the least recently freed block is the first to be reused (LRU).
    ``on_evict(block)``, when set, is told every time a block is handed out by ``allocate``: its
    old contents are gone.
    """

    def __init__(self, num_blocks: int, on_evict: Callable[[int], None] | None = None):
        self.num_blocks = validate.whole(num_blocks, "num_blocks", 1)
        self._refs = [0] * self.num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(self.num_blocks))
        self.on_evict = on_evict
        self.num_shared = 0                        # blocks with 2 references or more

    @property
    def num_free(self) -> int:
        """Blocks on the free queue (reference count 0)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def refcount(self, block) -> int:
        """References to ``block`` (0: free)."""
        return self._refs[_block_number(block, self.num_blocks)]

    def is_free(self, block) -> bool:
        return self._refs[_block_number(block, self.num_blocks)] == 0

    def allocate(self) -> int:
        """A free block, now with one reference; ``OutOfBlocks`` when none is free."""
        if not self._free:
            raise OutOfBlocks(1, 0, "allocate")
        block, _ = self._free.popitem(last=False)
        self._refs[block] = 1
        if self.on_evict is not None:
            self.on_evict(block)
        return block

    def allocate_many(self, n: int) -> list[int]:
        """``n`` free blocks at once, or ``OutOfBlocks`` (and none taken) when fewer are free."""
        if n > len(self._free):
            raise OutOfBlocks(n, len(self._free), "allocate_many")
        return [self.allocate() for _ in range(n)]

    def fork(self, block) -> int:
        """One more reference to a live block (two owners now share it); returns the block."""
        b = _block_number(block, self.num_blocks)
        if self._refs[b] == 0:
            raise ValueError(f"fork of block {b}, which is free: only a live block can be shared")
        self._refs[b] += 1
        self.num_shared += self._refs[b] == 2
        return b

    def free(self, block) -> None:
        """One reference fewer; at zero the block goes to the back of the free queue."""
        b = _block_number(block, self.num_blocks)
        if self._refs[b] == 0:
            raise ValueError(f"free of block {b}, which is already free (a double free)")
        self._refs[b] -= 1
        self.num_shared -= self._refs[b] == 1
        if self._refs[b] == 0:
            self._free[b] = None

    def revive(self, block) -> int:
        """Take a free block back, contents and all, with one reference (a prefix-cache hit on a
        block nobody holds any more).  A live block is shared with ``fork`` instead."""
        b = _block_number(block, self.num_blocks)
        if self._refs[b] != 0:
            raise ValueError(f"revive of block {b}, which is live ({self._refs[b]} references): use fork")
        del self._free[b]
        self._refs[b] = 1
        return b

    def free_blocks(self) -> list[int]:
        """The free queue, front (next handed out) first."""
        return list(self._free)

    def check(self) -> None:
        """Invariants 1 and 2 of the module: raise AssertionError naming the first broken one."""
        free = set(self._free)
        assert len(free) == len(self._free), "a block is on the free queue twice"
        assert self.num_shared == sum(n > 1 for n in self._refs), "the count of shared blocks is off"
        for b, n in enumerate(self._refs):
            assert n >= 0, f"block {b} has {n} references"
            assert (n == 0) == (b in free), (
                f"block {b} has {n} references but is {'' if b in free else 'not '}on the free queue")


# ---------------------------------------------------------------------- the pool


class BlockPool:
    """The memory of a paged cache: one key and one value pool per layer and their allocator.

    Several batches (``PagedKVCache``) may live on one pool: beam search recomputes a preempted
    beam in a batch of its own beside the others, sharing the prompt's blocks.
    """

    def __init__(self, n_layers: int, num_blocks: int, kv_heads: int, block_size: int, head_dim: int,
                 dtype="float32", compute_dtype=np.float32):
        for name, value in (("n_layers", n_layers), ("kv_heads", kv_heads), ("block_size", block_size),
                            ("head_dim", head_dim)):
            validate.whole(value, name, 1)
        self.allocator = BlockAllocator(num_blocks)
        self.num_blocks, self.block_size = int(num_blocks), int(block_size)
        self.n_layers, self.kv_heads, self.head_dim = int(n_layers), int(kv_heads), int(head_dim)
        self.format: CacheDtype = cache_dtype(dtype)
        self.compute_dtype = np.dtype(compute_dtype)
        shape = (self.num_blocks, self.block_size, self.kv_heads, self.head_dim)
        self.quantized = None                     # int4, int2: scales, offsets, windows (kvcache.quantized_blocks)
        if self.format.grouped:
            shape = shape[:3] + (packed_width(self.head_dim, self.format.bits),)
            self.quantized = QuantizedBlocks(self.n_layers, self.num_blocks, self.block_size, self.kv_heads,
                                             self.head_dim, self.format.bits, self.compute_dtype)
        self.k = [np.zeros(shape, self.format.storage) for _ in range(n_layers)]   # [NB, bs, G, d]
        self.v = [np.zeros(shape, self.format.storage) for _ in range(n_layers)]
        scaled = self.format.scaled
        self.k_scale = [np.zeros(shape[:3], np.float32) if scaled else None for _ in range(n_layers)]
        self.v_scale = [np.zeros(shape[:3], np.float32) if scaled else None for _ in range(n_layers)]
        self.batches: weakref.WeakSet = weakref.WeakSet()
        self.pinned: dict[int, int] = {}          # block -> references held outside any table
        self.prefix = None                        # a kvcache.prefix.PrefixIndex, when sharing prefixes
        self.bytes_copied = 0
        self._workspace: dict[str, np.ndarray] = {}

    def workspace(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """A reusable array of ``shape`` for gathered blocks (one per ``name``: keys, values and
        their scales), grown when a step needs more.  Gathering into fresh memory at every step
        would have the system hand out and clear new pages each time, which costs more than the
        copy itself."""
        size = int(np.prod(shape))
        buf = self._workspace.get(name)
        if buf is None or buf.size < size or buf.dtype != dtype:
            buf = self._workspace[name] = np.empty(max(size, 2 * (0 if buf is None else buf.size)), dtype)
        return buf[:size].reshape(shape)

    @property
    def bytes_per_slot(self) -> int:
        """Bytes one position takes in one layer: G rows of keys and of values (scales included;
        int4 and int2: the codes alone, ``block_bytes`` counts the rest)."""
        return kv_bytes(1, self.kv_heads, self.format, self.head_dim)

    def block_bytes(self, filled: int) -> int:
        """Bytes a block holding ``filled`` positions keeps in one layer (int4, int2: codes and
        scales when full, its window otherwise)."""
        if self.quantized is not None:
            return self.quantized.block_bytes(filled)
        return filled * self.bytes_per_slot

    @property
    def nbytes(self) -> int:
        """Bytes of every layer's pools (int4, int2: with their scales, offsets and windows)."""
        extra = 0 if self.quantized is None else self.quantized.nbytes
        return extra + sum(a.nbytes for arrs in (self.k, self.v, self.k_scale, self.v_scale)
                           for a in arrs if a is not None)

    def copy_block(self, src: int, dst: int, slots: int) -> None:
        """Copy the first ``slots`` positions of block ``src`` into block ``dst``, in every layer."""
        for arrs in (self.k, self.v, self.k_scale, self.v_scale):
            for a in arrs:
                if a is not None:
                    a[dst, :slots] = a[src, :slots]
        if self.quantized is not None:
            self.quantized.copy_block(src, dst, slots)
            self.bytes_copied += self.block_bytes(slots) * self.n_layers
            return
        self.bytes_copied += slots * self.bytes_per_slot * self.n_layers

    def write(self, layer: int, blocks: np.ndarray, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Layer ``layer``'s new positions k, v (N, G, d) into slots[i] of blocks[i], in the
        storage format (int4, int2: ``QuantizedBlocks.write``, after ``prepare``)."""
        if self.quantized is not None:
            self.quantized.write(layer, self.k[layer], self.v[layer], blocks, slots, k, v)
            return
        for buf, scales, x in ((self.k[layer], self.k_scale[layer], k), (self.v[layer], self.v_scale[layer], v)):
            data, scale = self.format.encode(x)
            buf[blocks, slots] = data                        # (N, G, d) into [NB, bs, G, d]
            if scales is not None:
                scales[blocks, slots] = scale

    def prepare(self, blocks: np.ndarray, slots: np.ndarray) -> None:
        """Before a step's writes: int4 and int2 give the blocks it leaves partly filled a window."""
        if self.quantized is not None:
            self.quantized.prepare(np.asarray(blocks), np.asarray(slots), self.allocator.refcount)

    def pin(self, block: int) -> None:
        """Hold one reference to a live block outside any table (beam search keeps the prompt's
        full blocks this way while its beams come and go)."""
        self.allocator.fork(block)
        self.pinned[block] = self.pinned.get(block, 0) + 1

    def unpin(self, block: int) -> None:
        if not self.pinned.get(block):
            raise ValueError(f"block {block} is not pinned")
        self.pinned[block] -= 1
        if not self.pinned[block]:
            del self.pinned[block]
        self.allocator.free(block)

    def check(self) -> None:
        """Invariants 1 to 4 over every batch on the pool."""
        self.allocator.check()
        held = dict(self.pinned)
        for batch in list(self.batches):
            batch.check_tables()
            for table in batch.tables:
                for b in table:
                    held[b] = held.get(b, 0) + 1
        for b in range(self.num_blocks):
            n = self.allocator._refs[b]
            assert held.get(b, 0) == n, f"block {b} has {n} references but {held.get(b, 0)} holders"


# ---------------------------------------------------------------------- one batch of sequences


class PagedKVCache(KVCache):
    """Sequences (rows) with block tables over a ``BlockPool``: the paged layout of ``KVCache``.

    ``PagedKVCache(n_layers, batch, kv_heads, head_dim, max_len, dtype, compute_dtype, capacity,
    block_size=16, num_blocks=None)`` makes a pool of ``num_blocks`` blocks (default: enough for
    ``capacity`` sequences of ``max_len``, the room a contiguous cache would reserve) and
    ``batch`` empty sequences; ``pool=`` puts the batch on an existing pool instead.

    ``cache[i]`` is layer i's ``PagedLayerCache`` (what the model calls); the tables and lengths
    belong to the batch and all layers advance together.  Rows are numbered 0 .. batch - 1 in
    the order they were added; ``free``, ``select`` and ``reorder`` renumber them as ``KVCache``
    does.
    """

    def __init__(self, n_layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int,
                 dtype="float32", compute_dtype=np.float32, capacity: int | None = None,
                 block_size: int = DEFAULT_BLOCK_SIZE, num_blocks: int | None = None,
                 pool: BlockPool | None = None):
        validate.whole(batch, "batch", 0)
        validate.whole(max_len, "max_len", 1)
        if capacity is not None and not batch <= capacity:
            raise ValueError(f"a cache needs batch ({batch}) <= capacity ({capacity})")
        if pool is None:
            validate.whole(block_size, "block_size", 1)
            if num_blocks is None:
                num_blocks = max(1, (capacity or batch)) * blocks_for(max_len, block_size)
            pool = BlockPool(n_layers, num_blocks, kv_heads, block_size, head_dim, dtype, compute_dtype)
        elif (pool.n_layers, pool.kv_heads, pool.head_dim) != (n_layers, kv_heads, head_dim):
            raise ValueError("the pool was made for another model's layers, heads or head_dim")
        self.pool = pool
        self.allocator = pool.allocator
        self.block_size = pool.block_size
        self._max_len = int(max_len)
        self._capacity = capacity
        self.tables: list[list[int]] = [[] for _ in range(batch)]
        self._lengths = np.zeros(max(batch, 4), np.int64)
        super().__init__([PagedLayerCache(self, i) for i in range(n_layers)], "paged")
        pool.batches.add(self)

    # ------------------------------------------------------------------ what it holds

    @property
    def batch(self) -> int:
        return len(self.tables)

    @property
    def capacity(self) -> int:
        return self._capacity if self._capacity is not None else max(self.batch, 1 << 30)

    @property
    def max_len(self) -> int:
        """Positions one sequence may hold (its table: at most ceil(max_len / block_size) blocks)."""
        return self._max_len

    @property
    def lengths(self) -> np.ndarray:
        view = self._lengths[: self.batch]
        view.flags.writeable = False
        return view

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free(self) -> int:
        """Blocks on the pool's free queue."""
        return self.allocator.num_free

    @property
    def num_used(self) -> int:
        """Live blocks of the pool (every batch on it, and pinned blocks)."""
        return self.allocator.num_used

    def free_blocks(self) -> list[int]:
        """The pool's free queue, front (next handed out) first."""
        return self.allocator.free_blocks()

    @property
    def block_tables(self) -> list[list[int]]:
        """Every sequence's blocks (copies)."""
        return [list(t) for t in self.tables]

    @property
    def k_pools(self) -> list[np.ndarray]:
        """Each layer's key pool, [num_blocks, kv_heads, block_size, head_dim] (views)."""
        return [layer.k_pool for layer in self.layers]

    @property
    def v_pools(self) -> list[np.ndarray]:
        return [layer.v_pool for layer in self.layers]

    def block_table(self, seq: int) -> list[int]:
        """The blocks of sequence ``seq``, in position order (a copy)."""
        return list(self.tables[self._row(seq)])

    def _row(self, seq) -> int:
        return int(validate.index([seq], self.batch, "sequence")[0])

    def _set_lengths(self, values) -> None:
        values = np.asarray(values, np.int64)
        if len(values) > len(self._lengths):
            self._lengths = np.zeros(max(2 * len(values), 4), np.int64)
        self._lengths[: len(values)] = values

    # ------------------------------------------------------------------ sequences come and go

    def add_sequence(self, blocks: Iterable[int] = (), length: int = 0) -> int:
        """A new sequence (the last row) holding ``blocks``, whose references the caller has
        already taken for it (``allocator.fork``, ``revive``), with ``length`` positions cached
        in them.  Returns its row."""
        blocks = [int(b) for b in blocks]
        if self.batch + 1 > self.capacity:
            raise ValueError(f"the cache has room for {self.capacity} sequences")
        if not 0 <= length <= len(blocks) * self.block_size or length > self.max_len:
            raise ValueError(f"{len(blocks)} blocks cannot hold {length} positions (max_len {self.max_len})")
        lengths = np.append(self.lengths, length)
        self.tables.append(blocks)
        self._set_lengths(lengths)
        return self.batch - 1

    def fork(self, seq) -> int:
        """A new sequence (the last row) with the same positions as ``seq``: one more reference to
        every block, nothing copied.  Returns its row."""
        row = self._row(seq)
        if self.batch + 1 > self.capacity:
            raise ValueError(f"the cache has room for {self.capacity} sequences")
        lengths = np.append(self.lengths, self._lengths[row])
        self.tables.append([self.allocator.fork(b) for b in self.tables[row]])
        self._set_lengths(lengths)
        return self.batch - 1

    def free(self, seq) -> None:
        """Forget sequence ``seq``: one reference fewer to each of its blocks; later rows move up."""
        row = self._row(seq)
        self.rearrange([r for r in range(self.batch) if r != row])

    def adopt(self, other: "PagedKVCache", seq: int) -> int:
        """Move sequence ``seq`` of another batch on the same pool into this one (its block
        references move with it, nothing is copied).  Returns its row here."""
        if other.pool is not self.pool:
            raise ValueError("adopt moves sequences between batches of one pool")
        row = other._row(seq)
        table, length = other.tables[row], int(other._lengths[row])
        other.tables.pop(row)
        other._set_lengths(np.delete(other._lengths[: other.batch + 1], row))
        lengths = np.append(self.lengths, length)
        self.tables.append(table)
        self._set_lengths(lengths)
        return self.batch - 1

    def new_batch(self, batch: int = 0, max_len: int | None = None) -> "PagedKVCache":
        """Another, empty batch on the same pool."""
        return PagedKVCache(self.pool.n_layers, batch, self.pool.kv_heads, self.pool.head_dim,
                            self.max_len if max_len is None else max_len, pool=self.pool)

    def release(self) -> None:
        """Free every sequence of the batch (their blocks go back to the pool)."""
        self.rearrange([])

    def reserve_blocks(self, seq, n: int) -> None:
        """``n`` more blocks at the end of sequence ``seq``'s table, now, before its positions
        arrive (a reservation made at admission); OutOfBlocks, with none taken, when fewer are
        free."""
        row = self._row(seq)
        n = validate.whole(n, "n", 0)
        if len(self.tables[row]) + n > blocks_for(self.max_len, self.block_size):
            raise ValueError(f"sequence {row} would hold {len(self.tables[row]) + n} blocks, past "
                             f"max_len ({self.max_len}) in blocks of {self.block_size}")
        self.tables[row].extend(self.allocator.allocate_many(n))

    def share_blocks(self, blocks: Iterable[int]) -> list[int]:
        """One more reference to each of these live blocks, for a sequence about to hold them
        (``add_sequence``); returns them."""
        return [self.allocator.fork(b) for b in blocks]

    # ------------------------------------------------------------------ rows rearranged (references only)

    def rearrange(self, idx) -> None:
        """Row i <- old row idx[i], for any number of rows (none frees them all; repeats share
        blocks): references are taken for the new tables before the old ones are dropped, so no
        block is freed and taken back.  ``reorder`` and ``select`` are its checked uses."""
        idx = [int(i) for i in validate.index(list(idx), self.batch, "row")]
        new_tables = [[self.allocator.fork(b) for b in self.tables[i]] for i in idx]
        new_lengths = self._lengths[idx].copy() if idx else np.zeros(0, np.int64)
        for table in self.tables:
            for b in reversed(table):                  # the tail first: evicted before the prefix
                self.allocator.free(b)
        self.tables = new_tables
        self._set_lengths(new_lengths)

    def reorder(self, beam_idx) -> None:
        """Row i becomes old row beam_idx[i] (repeats allowed): block-table entries move, keys
        and values do not.  Beams that repeat a parent share its blocks until one writes."""
        self.rearrange(check_reorder(beam_idx, self.batch, self.capacity))

    def select(self, rows) -> None:
        """Keep only the sequences ``rows`` (distinct), in that order; the others are freed."""
        self.rearrange(check_select(rows, self.batch))

    def crop(self, n) -> None:
        """Forget every position >= n (one n, or one per sequence); blocks left empty are freed."""
        lengths = np.minimum(self.lengths, check_crop(n, self.batch))
        bs, quantized = self.block_size, self.pool.quantized
        for row, table in enumerate(self.tables):
            keep = blocks_for(lengths[row], bs)
            while len(table) > keep:
                self.allocator.free(table.pop())
            cut, old = int(lengths[row]), int(self._lengths[row])
            if quantized is not None and cut % bs and old >= (cut // bs + 1) * bs:
                quantized.reopen(table[cut // bs], self.pool.k, self.pool.v)   # a full block partly filled again
        self._set_lengths(lengths)

    def copy(self) -> "PagedKVCache":
        """An independent copy: a new pool holding the same blocks, the same tables."""
        pool = self.pool
        new_pool = BlockPool(pool.n_layers, pool.num_blocks, pool.kv_heads, pool.block_size, pool.head_dim,
                             pool.format.name, pool.compute_dtype)
        for name in ("k", "v", "k_scale", "v_scale"):
            setattr(new_pool, name, [None if a is None else a.copy() for a in getattr(pool, name)])
        new_pool.quantized = None if pool.quantized is None else pool.quantized.copy()
        new = PagedKVCache(pool.n_layers, 0, pool.kv_heads, pool.head_dim, self.max_len,
                           capacity=self._capacity, pool=new_pool)
        for table, length in zip(self.tables, self.lengths):
            for b in table:
                if new.allocator.is_free(b):
                    new.allocator.revive(b)
                else:
                    new.allocator.fork(b)
            new.tables.append(list(table))
        new._set_lengths(self.lengths)
        return new

    # ------------------------------------------------------------------ a step: blocks first, then writes

    def _plan(self, rows: list[int], counts) -> tuple[int, list]:
        """Blocks a step would take (new blocks and copies), and the copies to make: the block a
        row's first new position falls in is copied first when another holder still references
        it (processed in row order, so of k rows sharing one block, k - 1 copy it)."""
        bs = self.block_size
        lengths = self._lengths[rows] if len(rows) else np.zeros(0, np.int64)
        held = np.fromiter((len(self.tables[r]) for r in rows), np.int64, len(rows))
        needed = int(np.maximum(0, -(-(lengths + np.asarray(counts, np.int64)) // bs) - held).sum())
        copies = []
        if self.allocator.num_shared:                    # some block has two holders: copy-on-write
            refs = {}
            for row, length in zip(rows, lengths.tolist()):
                if length % bs:                          # the first write lands in a partial block
                    i = length // bs
                    b = self.tables[row][i]
                    n = refs.get(b, self.allocator._refs[b])
                    if n > 1:
                        copies.append((row, i, length % bs))
                        refs[b] = n - 1
            needed += len(copies)
        return needed, copies

    def blocks_needed(self, counts) -> int:
        """Free blocks a step of counts[b] new positions per sequence would take."""
        counts = np.asarray(counts, np.int64)
        return self._plan(list(range(self.batch)), counts)[0]

    def _make_room(self, rows: list[int], counts: np.ndarray, what: str) -> None:
        """Room for counts[i] more positions in sequence rows[i], or an error with nothing
        changed: max_len (``CacheFullError``), free blocks (``OutOfBlocks``).  Then shared
        partial blocks are copied (copy-on-write) and new blocks appended."""
        lengths = self._lengths[rows] if len(rows) else np.zeros(0, np.int64)
        check_room(lengths, counts, self.max_len, rows)
        needed, copies = self._plan(rows, counts)
        if needed > self.allocator.num_free:
            raise OutOfBlocks(needed, self.allocator.num_free, what)
        for row, i, slots in copies:
            old = self.tables[row][i]
            new = self.allocator.allocate()
            self.pool.copy_block(old, new, slots)
            self.tables[row][i] = new
            self.allocator.free(old)
        bs, prefix = self.block_size, self.pool.prefix
        for row, n in zip(rows, counts.tolist()):
            length, table = int(self._lengths[row]), self.tables[row]
            if prefix is not None and length % bs:
                prefix.forget(table[length // bs])       # about to change: no longer a cached block
            for _ in range(blocks_for(length + n, bs) - len(table)):
                table.append(self.allocator.allocate())

    def reserve(self, counts) -> StepPlan:
        """Make room for counts[b] more positions in every sequence b before any layer writes
        (``_make_room``: an error leaves everything as it was), and return the step's plan: the
        slot of every new position and the table attention gathers with.  The new lengths hold
        from here on: the layers write the plan's slots."""
        counts = validate.step_counts(counts, self.batch)
        self._make_room(list(range(self.batch)), counts,
                        f"a step of {int(counts.sum())} new positions over {self.batch} "
                        f"sequence{'s' if self.batch != 1 else ''}")
        plan = plan_step(counts, self.lengths)
        table = self._padded_tables(blocks_for(plan.context, self.block_size))
        rows = np.arange(self.batch) if plan.is_decode else np.repeat(np.arange(self.batch), counts)
        self._set_lengths(plan.ends)
        blocks, slots = table[rows, plan.positions // self.block_size], plan.positions % self.block_size
        self.pool.prepare(blocks, slots)
        return plan.with_slots(table, blocks, slots)

    def append(self, seq, keys, values) -> None:
        """Append n positions to sequence ``seq`` alone, in every layer: ``keys[l]``,
        ``values[l]`` (n, G, d) for layer l.  Blocks are taken (and a shared last block copied)
        as ``reserve`` does; OutOfBlocks leaves everything as it was."""
        row = self._row(seq)
        pool = self.pool
        if len(keys) != pool.n_layers or len(values) != pool.n_layers:
            raise ValueError(f"append takes keys and values for each of the {pool.n_layers} layers")
        k0 = np.asarray(keys[0])
        n = k0.shape[0] if k0.ndim == 3 else -1
        for arrs in (keys, values):
            for x in arrs:
                if np.shape(x) != (n, pool.kv_heads, pool.head_dim) or n < 1:
                    raise ValueError(f"append takes (n, {pool.kv_heads}, {pool.head_dim}) arrays with n >= 1, "
                                     f"one per layer; got {np.shape(x)}")
        self._make_room([row], np.array([n]), f"appending {n} positions to sequence {row}")
        length = int(self._lengths[row])
        positions = np.arange(length, length + n)
        blocks = np.asarray(self.tables[row], np.int64)[positions // self.block_size]
        slots = positions % self.block_size
        pool.prepare(blocks, slots)
        for layer in range(pool.n_layers):
            pool.write(layer, blocks, slots, np.asarray(keys[layer], pool.compute_dtype),
                       np.asarray(values[layer], pool.compute_dtype))
        self._lengths[row] = length + n

    def _padded_tables(self, width: int) -> np.ndarray:
        """(batch, width) int64: each table's first ``width`` blocks, padded with block 0 (a
        pad is never read: the lengths mask it)."""
        out = np.zeros((self.batch, max(width, 1)), np.int64)
        for row, table in enumerate(self.tables):
            n = min(width, len(table))
            out[row, :n] = table[:n]
        return out

    # ------------------------------------------------------------------ bookkeeping

    def check_tables(self) -> None:
        """Invariant 4 for this batch."""
        limit = blocks_for(self.max_len, self.block_size)
        for row, table in enumerate(self.tables):
            assert len(set(table)) == len(table), f"sequence {row} names a block twice: {table}"
            need = blocks_for(int(self._lengths[row]), self.block_size)
            assert need <= len(table) <= max(limit, need), (
                f"sequence {row} holds {int(self._lengths[row])} positions in {len(table)} blocks")
            for b in table:
                assert self.allocator._refs[b] >= 1, f"sequence {row} names block {b}, which is free"

    def check(self) -> None:
        """Every invariant of the module, over the whole pool."""
        self.pool.check()

    def filled_slots(self) -> int:
        """Distinct positions holding a token, over the live blocks of this batch (a block shared
        by several sequences counts once, with the most positions any of them fills)."""
        if self.allocator.num_shared == 0:              # no block shared anywhere: one owner each
            return int(self.lengths.sum())
        bs = self.block_size
        fill: dict[int, int] = {}
        for table, length in zip(self.tables, self.lengths):
            length = int(length)
            for i, b in enumerate(table):
                n = min(bs, max(0, length - i * bs))
                if n > fill.get(b, -1):
                    fill[b] = n
        return sum(fill.values())

    def blocks_held(self) -> int:
        """Distinct blocks named by this batch's tables."""
        return len({b for table in self.tables for b in table})

    @property
    def nbytes(self) -> int:
        """Bytes of the pool (every block, every layer): the memory the cache was given."""
        return self.pool.nbytes

    @property
    def used_bytes(self) -> int:
        """Bytes holding cached positions (distinct slots, every layer; int4 and int2: each
        block's codes and scales, or its window)."""
        if self.pool.quantized is None:
            return self.filled_slots() * self.pool.bytes_per_slot * self.pool.n_layers
        return sum(self.pool.block_bytes(n) for n in self.block_fill().values()) * self.pool.n_layers

    def block_fill(self) -> dict[int, int]:
        """Positions filled in each block this batch holds (the most any of its holders fills)."""
        bs = self.block_size
        fill: dict[int, int] = {}
        for table, length in zip(self.tables, self.lengths.tolist()):
            for i, b in enumerate(table):
                n = min(bs, max(0, length - i * bs))
                if n and n > fill.get(b, 0):
                    fill[b] = n
        return fill

    @property
    def bytes_copied(self) -> int:
        """Bytes copied by copy-on-write so far (reorder and select copy nothing)."""
        return self.pool.bytes_copied


# ---------------------------------------------------------------------- one layer's view


class PagedLayerCache(LayerCache):
    """Layer ``index`` of a ``PagedKVCache``: its pools, read and written through the batch's
    block tables.  ``reserve``, ``reorder``, ``select`` and ``crop`` act on the batch (every
    layer at once: the tables are shared)."""

    def __init__(self, cache: PagedKVCache, index: int):
        self.cache, self.index = cache, index
        pool = cache.pool
        self.format, self.compute_dtype = pool.format, pool.compute_dtype
        self.kv_heads, self.head_dim = pool.kv_heads, pool.head_dim

    # the pools of this layer, in the order of the interface: [num_blocks, kv_heads, block_size, head_dim]
    @property
    def k_pool(self) -> np.ndarray:
        return self.cache.pool.k[self.index].transpose(0, 2, 1, 3)

    @property
    def v_pool(self) -> np.ndarray:
        return self.cache.pool.v[self.index].transpose(0, 2, 1, 3)

    @property
    def batch(self) -> int:
        return self.cache.batch

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    @property
    def max_len(self) -> int:
        return self.cache.max_len

    @property
    def lengths(self) -> np.ndarray:
        return self.cache.lengths

    def reserve(self, counts) -> StepPlan:
        """The batch's step (``PagedKVCache.reserve``): room in every layer at once."""
        return self.cache.reserve(counts)

    # ------------------------------------------------------------------ writing

    def update(self, k: np.ndarray, v: np.ndarray, plan: StepPlan) -> None:
        """Write the step's positions (k, v (N, G, d) packed) into the slots the plan reserved."""
        if getattr(plan, "slot_blocks", None) is None:
            raise TypeError("a paged layer writes a plan made by its PagedKVCache.reserve")
        check_plan(plan, self.cache.lengths, "ends")
        self.cache.pool.write(self.index, plan.slot_blocks, plan.slot_offsets, k, v)

    # ------------------------------------------------------------------ reading

    def _rows(self, buf, scales, table: np.ndarray, T: int, lengths) -> np.ndarray:
        """Positions 0 .. T - 1 of the sequences whose (padded) tables are ``table`` (B, n):
        (B, G, T, d) in the compute dtype.  One gather, np.take of the blocks: [B, n, bs, G, d],
        which is already (B, n bs, G, d) in position order; the transpose is a view.  The result
        lives in the pool's workspace: valid until the next gather of the same kind.  int4 and
        int2 decode the codes and lay each sequence's window over its partly filled last block
        (``lengths``: the sequences' lengths)."""
        B, n = table.shape
        bs = self.cache.block_size
        pool = self.cache.pool
        if pool.quantized is not None:
            is_key = buf is pool.k[self.index]
            return pool.quantized.read(self.index, is_key, buf, table, T, lengths).transpose(0, 2, 1, 3)
        name = "k" if buf is pool.k[self.index] else "v"
        data = np.take(buf, table, axis=0, mode="clip",      # (clip: take does not buffer out=)
                       out=pool.workspace(name, (B, n) + buf.shape[1:], buf.dtype))
        data = data.reshape(B, n * bs, self.kv_heads, self.head_dim)[:, :T]
        scale = None
        if scales is not None:
            out = pool.workspace(name + "_scale", (B, n) + scales.shape[1:], scales.dtype)
            scale = np.take(scales, table, axis=0, mode="clip", out=out)
            scale = scale.reshape(B, n * bs, self.kv_heads)[:, :T].transpose(0, 2, 1)
        return self.format.decode(data.transpose(0, 2, 1, 3), scale, self.compute_dtype)

    def _gathered(self, table: np.ndarray, T: int, lengths) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values (B, G, T, d) of the sequences whose tables are ``table`` (B, n) and
        lengths ``lengths`` (B,)."""
        pool, i = self.cache.pool, self.index
        return (self._rows(pool.k[i], pool.k_scale[i], table, T, lengths),
                self._rows(pool.v[i], pool.v_scale[i], table, T, lengths))

    def attend(self, q: np.ndarray, plan: StepPlan) -> np.ndarray:
        """q (N, H, d): the step's queries  ->  (N, H, d).  Rows with one new token attend
        together (one gather of the plan's table, ``decode_attention``); longer ones (a prompt)
        one by one, causally."""
        check_plan(plan, self.cache.lengths, "ends")
        if plan.is_decode:
            K, V = self._gathered(plan.table, plan.context, plan.ends)
            return decode_attention(q, K, V, plan.ends)
        out = np.empty_like(q)
        bs, offsets, ends = self.cache.block_size, plan.offsets, plan.ends
        ones = np.flatnonzero(plan.counts == 1)
        if len(ones) > 1:                               # the decoding rows of a mixed step, together
            T = int(ends[ones].max())
            K, V = self._gathered(plan.table[ones, : blocks_for(T, bs)], T, ends[ones])
            out[offsets[ones]] = decode_attention(q[offsets[ones]], K, V, ends[ones])
        for b in np.flatnonzero(plan.counts != 1) if len(ones) > 1 else range(plan.batch):
            t, lo, hi = int(ends[b]), offsets[b], offsets[b + 1]
            K, V = self._gathered(plan.table[b: b + 1, : blocks_for(t, bs)], t, [t])
            out[lo:hi] = attend_new_tokens(q[lo:hi], K[0], V[0])      # (G, t, d) each
        return out

    def keys(self, row: int) -> np.ndarray:
        """The keys of sequence ``row``: a new (G, length, d) array in the compute dtype."""
        return self._one(row, self.cache.pool.k[self.index], self.cache.pool.k_scale[self.index])

    def values(self, row: int) -> np.ndarray:
        """The values of sequence ``row``: a new (G, length, d) array in the compute dtype."""
        return self._one(row, self.cache.pool.v[self.index], self.cache.pool.v_scale[self.index])

    def _one(self, row, buf, scales) -> np.ndarray:
        cache = self.cache
        row = cache._row(row)
        t = int(cache.lengths[row])
        if t == 0:
            return np.zeros((self.kv_heads, 0, self.head_dim), self.compute_dtype)
        table = np.asarray(cache.block_table(row)[: blocks_for(t, cache.block_size)], np.int64)[None, :]
        return np.array(self._rows(buf, scales, table, t, [t])[0])

    # ------------------------------------------------------------------ rows: the batch's

    def reorder(self, beam_idx) -> None:
        self.cache.reorder(beam_idx)

    def select(self, rows) -> None:
        self.cache.select(rows)

    def crop(self, n) -> None:
        self.cache.crop(n)

    def copy(self):
        raise TypeError("a paged layer shares its block tables with the other layers: copy the PagedKVCache")

    @property
    def nbytes(self) -> int:
        pool = self.cache.pool
        i = self.index
        return sum(a.nbytes for a in (pool.k[i], pool.v[i], pool.k_scale[i], pool.v_scale[i]) if a is not None)

    @property
    def used_bytes(self) -> int:
        return self.cache.filled_slots() * self.cache.pool.bytes_per_slot

    @property
    def bytes_copied(self) -> int:
        return self.cache.pool.bytes_copied // max(1, self.cache.pool.n_layers)


def paged_cache(n_layers: int, batch: int, kv_heads: int, head_dim: int, max_len: int,
                dtype="float32", compute_dtype=np.float32, capacity: int | None = None,
                block_size: int = DEFAULT_BLOCK_SIZE, num_blocks: int | None = None) -> PagedKVCache:
    """A pool of ``num_blocks`` blocks of ``block_size`` positions per layer (default: as many as
    ``capacity`` sequences of ``max_len`` need) and ``batch`` empty sequences."""
    return PagedKVCache(n_layers, batch, kv_heads, head_dim, max_len, dtype, compute_dtype, capacity,
                        block_size=block_size, num_blocks=num_blocks)
