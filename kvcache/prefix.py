"""Prefix sharing: full blocks named by their tokens, reused by every later request that starts
the same way (a shared system prompt, a few-shot preamble, an earlier turn of a conversation).

A full block's keys and values depend on its own tokens and on every token before it, so it is
named by a hash chained through the blocks of its prefix::

    h_0 = hash(root, tokens[0 : bs])
    h_i = hash(h_{i-1}, tokens[i bs : (i + 1) bs])

A new request walks its prompt block by block and looks each h_i up; it reuses blocks while they
match and computes the rest.  A hash can collide (two different prefixes, one number), so a
match is never taken on the hash alone: the cached block's own tokens must equal the request's,
and its parent must be the very block (with the same contents) the request matched one step
before.  By induction a reused block holds exactly the request's prefix.

Blocks stay cached after their last sequence frees them: the allocator keeps them on its free
queue, least recently freed first, and a hit on one takes it back (``revive``) with its contents.
Only when the allocator hands a block out again (``on_evict``) is it forgotten: least recently
used blocks go first.  Blocks are never written once full, so a cached block cannot change under
a reader; a block about to be written (after a crop) is forgotten first.

SGLang's RadixAttention keeps the same information as a radix tree of token sequences; vLLM v1
keeps, as here, a table from block hashes to blocks with an LRU free queue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["PrefixIndex", "chain_hash", "PrefixStats"]


def chain_hash(parent: int | None, tokens: tuple[int, ...]) -> int:
    """The name of a full block: Python's hash of (parent's name, its tokens).  Integers and
    tuples of integers hash the same in every run (no PYTHONHASHSEED involved)."""
    return hash((parent, tokens))


@dataclass
class PrefixStats:
    """What the lookups found: blocks and tokens asked for, found cached."""

    lookups: int = 0              # requests looked up
    blocks_queried: int = 0       # full blocks of their tokens
    blocks_hit: int = 0
    tokens_queried: int = 0       # tokens of the requests looked up
    tokens_hit: int = 0           # of which served from the cache (no prefill)
    collisions: int = 0           # hash matches whose tokens or parent differed (rejected)

    @property
    def hit_rate(self) -> float:
        """Share of the looked-up tokens served from the cache."""
        return self.tokens_hit / self.tokens_queried if self.tokens_queried else 0.0


class PrefixIndex:
    """Full blocks of a ``BlockPool`` by the hash of their prefix (see the module docstring)."""

    def __init__(self, pool, hash_fn: Callable[[int | None, tuple], int] = chain_hash):
        self.pool = pool
        self.allocator = pool.allocator
        self.block_size = pool.block_size
        self.hash_fn = hash_fn
        self._buckets: dict[int, list[int]] = {}               # hash -> cached blocks
        self._entry: dict[int, tuple] = {}                     # block -> (hash, parent id, tokens)
        self._version = [0] * pool.num_blocks                  # bumped when a block's contents go
        self.stats = PrefixStats()
        if self.allocator.on_evict is not None or pool.prefix is not None:
            raise ValueError("the pool already has a prefix index")
        self.allocator.on_evict = self.forget
        pool.prefix = self

    def __len__(self) -> int:
        return len(self._entry)

    def _identity(self, block: int | None):
        """A block and the version of its contents (None: the root, before the first block)."""
        return None if block is None else (block, self._version[block])

    # ------------------------------------------------------------------ finding

    def match(self, tokens: Sequence[int], limit: int | None = None) -> list[int]:
        """The cached blocks holding the longest prefix of ``tokens`` in whole blocks (at most
        ``limit`` blocks), without taking them.  Counts nothing (``lookup`` does)."""
        bs = self.block_size
        n = len(tokens) // bs if limit is None else min(limit, len(tokens) // bs)
        found: list[int] = []
        parent_hash, parent = None, None
        for i in range(n):
            block_tokens = tuple(int(t) for t in tokens[i * bs:(i + 1) * bs])
            h = self.hash_fn(parent_hash, block_tokens)
            hit = None
            for b in self._buckets.get(h, ()):
                _, parent_id, cached_tokens = self._entry[b]
                if cached_tokens == block_tokens and parent_id == self._identity(parent):
                    hit = b
                    break
                self.stats.collisions += 1
            if hit is None:
                break
            found.append(hit)
            parent_hash, parent = h, hit
        return found

    def lookup(self, tokens: Sequence[int]) -> list[int]:
        """``match`` for a request about to run: at most (len(tokens) - 1) // block_size blocks
        (its last token is always computed, to give the logits of the next one).  Counts
        nothing: ``record`` counts a lookup once the request is admitted.  The caller takes the
        blocks with ``take``."""
        return self.match(tokens, (len(tokens) - 1) // self.block_size)

    def record(self, tokens: Sequence[int], found: Sequence[int]) -> None:
        """Count one admitted request's lookup in ``stats``."""
        s = self.stats
        s.lookups += 1
        s.blocks_queried += len(tokens) // self.block_size
        s.blocks_hit += len(found)
        s.tokens_queried += len(tokens)
        s.tokens_hit += len(found) * self.block_size

    def take(self, blocks: Sequence[int]) -> list[int]:
        """One reference to each block for a new sequence: shared if live, taken back from the
        free queue (contents intact) if nobody holds it."""
        for b in blocks:
            if self.allocator.is_free(b):
                self.allocator.revive(b)
            else:
                self.allocator.fork(b)
        return list(blocks)

    def blocks_to_take_from_free(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` sit on the free queue (taking them costs free blocks)."""
        return sum(self.allocator.is_free(b) for b in blocks)

    # ------------------------------------------------------------------ remembering and forgetting

    def register(self, table: Sequence[int], tokens: Sequence[int]) -> int:
        """Cache the full blocks of a sequence (``table`` its blocks, ``tokens`` the tokens they
        hold) that are not cached yet.  A block whose prefix is already cached in another block
        (two requests with one system prompt, computed in the same step) stays out: the first
        copy is the one found, and the blocks after it are named as its children.  Returns the
        number of blocks added."""
        bs = self.block_size
        added = 0
        parent_hash, parent = None, None
        for i in range(min(len(tokens) // bs, len(table))):
            b = table[i]
            if b in self._entry:                              # cached already (a hit, or earlier)
                parent_hash, parent = self._entry[b][0], b
                continue
            block_tokens = tuple(int(t) for t in tokens[i * bs:(i + 1) * bs])
            h = self.hash_fn(parent_hash, block_tokens)
            parent_id = self._identity(parent)
            twin = next((o for o in self._buckets.get(h, ())
                         if self._entry[o][2] == block_tokens and self._entry[o][1] == parent_id), None)
            if twin is not None:              # another block holds this prefix: the chain goes on
                parent_hash, parent = h, twin     # through it (equal contents), this one stays out
                continue
            self._entry[b] = (h, parent_id, block_tokens)
            self._buckets.setdefault(h, []).append(b)
            added += 1
            parent_hash, parent = h, b
        return added

    def forget(self, block: int) -> None:
        """``block``'s contents are going (handed out again, or about to be written)."""
        entry = self._entry.pop(block, None)
        self._version[block] += 1
        if entry is not None:
            bucket = self._buckets[entry[0]]
            bucket.remove(block)
            if not bucket:
                del self._buckets[entry[0]]

    def check(self) -> None:
        """Every cached block is full and its bucket lists it once; buckets hold no stale block."""
        listed = [b for bucket in self._buckets.values() for b in bucket]
        assert len(listed) == len(set(listed)) == len(self._entry), "a bucket and the entries disagree"
        for h, bucket in self._buckets.items():
            for b in bucket:
                assert self._entry[b][0] == h, f"block {b} is in the bucket of another hash"
                assert len(self._entry[b][2]) == self.block_size
