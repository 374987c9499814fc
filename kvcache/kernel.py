"""One attention kernel over a fixed buffer of ``max_seq_len`` rows and a runtime length.

A serving engine compiles its attention kernel once.  The cache it reads is a buffer of
``max_seq_len`` rows (4096, say) of which only the first ``seq_len`` hold keys and values; the
rest may hold anything (zeros, an earlier sequence's rows, NaN).  ``seq_len`` is an argument
given at run time, and the kernel must never let a row past it change the answer.

Notation (shapes next to the code use it)::

    N   max_seq_len, the rows of the buffer          d    the width of a query and a key
    t   seq_len, the rows that hold the sequence     d_v  the width of a value
    B   block, the rows one step of the loop reads   m    queries in a chunk (1 when decoding)

The kernel walks the key axis block by block, because that axis is a reduction: each block's
scores are turned into weights and summed into the output before the next block is read.  An
**online softmax** makes that possible without seeing every score first.  It keeps, per query,

    M   the largest score so far        (starts at -inf)
    l   sum_j exp(s_j - M) so far        (starts at 0)
    a   sum_j exp(s_j - M) v_j so far    (starts at 0, a vector of d_v)

and when a block brings scores s_j with a larger maximum M', rescales what it holds by
exp(M - M') before adding the block: l' = exp(M - M') l + sum exp(s_j - M'), and the same for a.
At the end out = a / l, which equals softmax(s) V exactly (up to rounding).

Because the length is a bound of that loop, a runtime length costs nothing to support: the loop
stops after ceil(t / B) blocks (the *early exit*).  Every block before the last lies wholly
inside the sequence; only the last may be partial, and only there are the scores of rows at or
past t set to -inf (weight exactly 0) and the value rows past t replaced by zeros before they
enter the sum (0 x NaN is NaN, so a zero weight alone does not protect the sum).

Everything here is numpy, computes in the inputs' floating type (float64 unless every input is
float32 or narrower; integers count as float64), never modifies its arguments, and raises
``ValueError`` naming the argument for input it cannot use.

Variants, each equal to plain attention over the first t rows:

* ``blocked_prefill``: a chunk of m queries at positions t - m ... t - 1, with the causal mask;
* ``transposed_prefill``: the same products written transposed, (V^T (K^T Q^T))^T;
* ``partial_decode`` / ``combine_partials`` / ``split_k_decode``: split-K (Flash-Decoding): the
  key axis cut into chunks walked independently (in threads), each returning its partial output
  and log-sum-exp, combined exactly;
* ``paged_decode``: the same loop over a block table into a paged pool laid out per layer as
  ``[num_blocks, kv_heads, block_size, head_dim]``, with grouped query heads.
"""
from __future__ import annotations

import contextlib
import math
import numbers
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

__all__ = [
    "blocks_visited", "gemm_shapes", "BlockState", "walk_blocks",
    "blocked_decode", "full_buffer_decode", "one_shot_decode", "blocked_prefill", "transposed_prefill",
    "split_ranges", "partial_decode", "combine_partials", "split_k_decode",
    "paged_decode", "gather_pages",
]


# ---------------------------------------------------------------- checking the arguments


def _count(value, name: str, *, low: int = 1) -> int:
    """``value`` as a Python int >= ``low``, or a ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    return value


def _array(value, name: str, ndim: int, what: str) -> np.ndarray:
    """``value`` as an array of ``ndim`` dimensions of real numbers (not copied when it is one)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have shape {what}, got shape {arr.shape}")
    return arr


def _dtype(*arrays) -> np.dtype:
    """The floating type the kernel computes in: float32 when every input is float32 or
    narrower, float64 otherwise (integers count as float64)."""
    kinds = [a.dtype for a in arrays]
    if all(k.kind == "f" and k.itemsize <= 4 for k in kinds):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _buffers(K_buf, V_buf, d: int):
    """The key and value buffers, checked against each other and against the query width."""
    K = _array(K_buf, "K_buf", 2, "(max_seq_len, d)")
    V = _array(V_buf, "V_buf", 2, "(max_seq_len, d_v)")
    if K.shape[0] < 1:
        raise ValueError("K_buf has no rows: a buffer holds at least one position")
    if K.shape[1] != d:
        raise ValueError(f"K_buf has rows of width {K.shape[1]} but the query has width {d}")
    if V.shape[0] != K.shape[0]:
        raise ValueError(f"V_buf has {V.shape[0]} rows but K_buf has {K.shape[0]}: one value row per key row")
    if V.shape[1] < 1:
        raise ValueError("V_buf has rows of width 0")
    return K, V


def _length(seq_len, capacity: int, where: str = "the buffer holds") -> int:
    seq_len = _count(seq_len, "seq_len")
    if seq_len > capacity:
        raise ValueError(f"seq_len is {seq_len} but {where} {capacity} positions")
    return seq_len


# ---------------------------------------------------------------- the loop and its count


def blocks_visited(seq_len: int, block: int) -> int:
    """Blocks of ``block`` rows the loop reads for a sequence of ``seq_len``: ceil(t / B).

    The last one is partial unless B divides t.  (A loop that masked the whole buffer instead
    would read ceil(N / B) blocks whatever t is.)
    """
    seq_len, block = _count(seq_len, "seq_len"), _count(block, "block")
    return -(-seq_len // block)


def gemm_shapes(m: int, seq_len: int, d: int, d_v: int | None = None) -> list[tuple[str, str, str, str]]:
    """The matrix products of attention for ``m`` queries over ``seq_len`` keys, as the kernel's
    two GEMMs name them: (name, left operand, right operand, result), shapes as "[rows x cols]".

    gemm0 = Q x K^T : [m x d] x [d x t] -> [m x t]      (the N axis of gemm0 is t)
    softmax          : [m x t] -> [m x t]
    gemm1 = P x V    : [m x t] x [t x d_v] -> [m x d_v]  (the K axis of gemm1 is t)
    """
    m, seq_len, d = _count(m, "m"), _count(seq_len, "seq_len"), _count(d, "d")
    d_v = d if d_v is None else _count(d_v, "d_v")

    def box(r, c):
        return f"[{r} x {c}]"
    return [("gemm0 = Q x K", box(m, d), box(d, seq_len), box(m, seq_len)),
            ("softmax", box(m, seq_len), "", box(m, seq_len)),
            ("gemm1 = P x V", box(m, seq_len), box(seq_len, d_v), box(m, d_v))]


@dataclass(frozen=True)
class BlockState:
    """The online softmax's state after a block: for each query, the running maximum ``M``,
    the running sum ``l`` = sum exp(s_j - M) and the accumulator ``a`` = sum exp(s_j - M) v_j,
    over the keys of every block read so far.  ``block`` is the block just read (0-based),
    ``start`` and ``stop`` its rows, ``masked`` whether any of its scores were set to -inf."""

    block: int
    start: int
    stop: int
    masked: bool
    M: np.ndarray          # (..., m)
    l: np.ndarray          # (..., m)
    a: np.ndarray          # (..., m, d_v)

    def output(self) -> np.ndarray:
        """a / l: the attention output over the keys read so far (..., m, d_v)."""
        return self.a / self.l[..., None]

    def log_sum_exp(self) -> np.ndarray:
        """L = M + log l = log sum_j exp(s_j) over the keys read so far (..., m)."""
        return self.M + np.log(self.l)


def _garbage_allowed(past_the_sequence: bool):
    """numpy's warnings silenced for a product that reads rows past the sequence (inf x 0 and
    inf - inf there are expected, and masked right after); any other block keeps them."""
    return np.errstate(invalid="ignore", over="ignore") if past_the_sequence else contextlib.nullcontext()


def _online(blocks: Iterable[tuple[int, int, np.ndarray, np.ndarray]], Q: np.ndarray, positions: np.ndarray,
            seq_len: int, dtype, *, mask_scores: bool = True, mask_values: bool = True) -> Iterator[BlockState]:
    """The online softmax over ``blocks``: (index, first row, K rows (..., n, d), V rows (..., n, d_v)).

    Q (..., m, d) holds queries at ``positions`` (m,); key j may be seen by query i when
    j <= positions[i] (which is j < seq_len for a decode step).  Leading axes broadcast (a kv
    head's keys against its group of query heads).  A block is masked only when one of its rows
    reaches past a query's position or past ``seq_len``.
    """
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Q = Q.astype(dtype, copy=False)
    lead = Q.shape[:-1]
    M = l = a = None
    first_unseen = int(positions.min()) + 1          # rows from here on are hidden from some query
    for index, start, K_blk, V_blk in blocks:
        K_blk = K_blk.astype(dtype, copy=False)
        V_blk = V_blk.astype(dtype, copy=False)
        if a is None:
            M = np.full(lead, -np.inf, dtype)
            l = np.zeros(lead, dtype)
            a = np.zeros(lead + (V_blk.shape[-1],), dtype)
        n = K_blk.shape[-2]
        stop = start + n
        with _garbage_allowed(stop > seq_len):
            S = (Q @ np.swapaxes(K_blk, -1, -2)) * dtype.type(scale)  # (..., m, n); rows past t: garbage
        masked = stop > first_unseen or stop > seq_len
        if masked:
            rows = np.arange(start, stop)
            if mask_scores:                                          # -inf: weight exactly 0
                S = np.where(rows[None, :] <= positions[:, None], S, -np.inf)
            if mask_values and stop > seq_len:                       # rows past t: zeros, not 0 x garbage
                V_blk = V_blk.copy()
                V_blk[..., max(seq_len - start, 0):, :] = 0
        M_new = np.maximum(M, S.max(axis=-1))
        shift = np.where(np.isneginf(M_new), dtype.type(0), M_new)  # a query that saw nothing yet
        P = np.exp(S - shift[..., None])                             # (..., m, n), entries in [0, 1]
        rescale = np.exp(M - shift)                                  # exp(M - M'): 0 at the start
        l = rescale * l + P.sum(axis=-1)
        a = rescale[..., None] * a + P @ V_blk                       # (..., m, d_v)
        M = M_new
        yield BlockState(index, start, stop, masked, M, l, a)


def _contiguous_blocks(K, V, block: int, first: int, end: int):
    """(index, first row, K rows, V rows) of blocks ``first`` .. ``end - 1`` of the buffers; the
    last block of a buffer stops at its end."""
    for b in range(first, end):
        lo = b * block
        yield b, lo, K[lo:lo + block], V[lo:lo + block]


def walk_blocks(q, K_buf, V_buf, seq_len, block, *, mask_scores: bool = True,
                mask_values: bool = True, early_exit: bool = True) -> list[BlockState]:
    """The state of the online softmax after each block ``blocked_decode`` reads, in order.

    ``mask_scores=False`` or ``mask_values=False`` leaves out one of the two masks of the last
    block, to show what goes wrong without it; ``early_exit=False`` reads every block of the
    buffer (``full_buffer_decode``).
    """
    q = _array(q, "q", 1, "(d,)")
    K, V = _buffers(K_buf, V_buf, q.shape[0])
    seq_len, block = _length(seq_len, K.shape[0]), _count(block, "block")
    positions = np.array([seq_len - 1])
    end = blocks_visited(seq_len, block) if early_exit else blocks_visited(K.shape[0], block)
    blocks = _contiguous_blocks(K, V, block, 0, end)
    walk = _online(blocks, q[None, :], positions, seq_len, _dtype(q, K, V),
                   mask_scores=mask_scores, mask_values=mask_values)
    if mask_scores and mask_values:
        return list(walk)
    with np.errstate(invalid="ignore", over="ignore"):             # garbage is meant to get in here
        return list(walk)


def blocked_decode(q, K_buf, V_buf, seq_len, block):
    """Attention of one query over the first ``seq_len`` rows of the buffers, block by block.

    q (d,), K_buf (N, d), V_buf (N, d_v), 1 <= seq_len <= N, block >= 1
    -> (out (d_v,), visited), out = softmax(K_buf[:t] q / sqrt(d)) V_buf[:t] and
    visited = ceil(t / B), the blocks the loop read.  Rows of the buffers past t are never
    allowed to change ``out``, whatever they hold.
    """
    states = walk_blocks(q, K_buf, V_buf, seq_len, block)
    return states[-1].output()[0], len(states)


def full_buffer_decode(q, K_buf, V_buf, seq_len, block):
    """The same output from the same loop **without** the early exit: every block of the buffer
    is read, and those past ``seq_len`` are masked whole.  What a kernel that masks the buffer
    instead of stopping does; its work is that of N rows whatever t is.
    -> (out (d_v,), visited = ceil(N / B))."""
    states = walk_blocks(q, K_buf, V_buf, seq_len, block, early_exit=False)
    return states[-1].output()[0], len(states)


def one_shot_decode(q, K, V):
    """Plain attention of one query over every row given, in one pass and without a mask:
    softmax(K q / sqrt(d)) V, in the inputs' floating type.  q (d,), K (t, d), V (t, d_v) -> (d_v,)."""
    q = _array(q, "q", 1, "(d,)")
    K, V = _buffers(K, V, q.shape[0])
    dtype = _dtype(q, K, V)
    s = (K.astype(dtype, copy=False) @ q.astype(dtype, copy=False)) * dtype.type(1 / math.sqrt(q.shape[0]))
    w = np.exp(s - s.max())
    return (w @ V.astype(dtype, copy=False)) / w.sum()


# ---------------------------------------------------------------- a chunk of queries (prefill)


def _chunk(Q, K_buf, V_buf, seq_len, block):
    Q = _array(Q, "Q", 2, "(m, d)")
    K, V = _buffers(K_buf, V_buf, Q.shape[1])
    seq_len, block = _length(seq_len, K.shape[0]), _count(block, "block")
    m = Q.shape[0]
    if not 1 <= m <= seq_len:
        raise ValueError(f"Q has {m} rows: a chunk holds 1 to seq_len = {seq_len} queries "
                         f"(positions seq_len - m ... seq_len - 1)")
    return Q, K, V, seq_len, block, np.arange(seq_len - m, seq_len)


def blocked_prefill(Q, K_buf, V_buf, seq_len, block):
    """Causal attention of a chunk of m queries at positions t - m ... t - 1 (the last m of the
    sequence), block by block: query i sees keys 0 ... t - m + i.

    Q (m, d), K_buf (N, d), V_buf (N, d_v) -> (out (m, d_v), visited = ceil(t / B)).
    m = t is a whole prompt's prefill; m = 1 is ``blocked_decode``.  Blocks that end before
    t - m + 1 are read unmasked; only the blocks the chunk's diagonal crosses are masked.
    """
    Q, K, V, seq_len, block, positions = _chunk(Q, K_buf, V_buf, seq_len, block)
    blocks = _contiguous_blocks(K, V, block, 0, blocks_visited(seq_len, block))
    states = list(_online(blocks, Q, positions, seq_len, _dtype(Q, K, V)))
    return states[-1].output(), len(states)


def transposed_prefill(Q, K_buf, V_buf, seq_len, block):
    """``blocked_prefill`` written transposed, as (V^T (K^T Q^T))^T in the note's notation where
    K is stored [d x t]: the sequence axis is the rows of S^T = K Q^T and the reduction axis of
    O^T = V^T P^T.  The running maximum and sum are kept per column (one column per query); the
    mask sets rows of S^T to -inf and zeroes columns of V^T.  Equal to ``blocked_prefill``.

    Q (m, d), K_buf (N, d), V_buf (N, d_v) -> (out (m, d_v), visited).
    """
    Q, K, V, seq_len, block, positions = _chunk(Q, K_buf, V_buf, seq_len, block)
    dtype = _dtype(Q, K, V)
    Qt = Q.astype(dtype, copy=False).T                               # (d, m)
    scale = dtype.type(1 / math.sqrt(Q.shape[1]))
    M = np.full(Q.shape[0], -np.inf, dtype)                          # one per column
    l = np.zeros(Q.shape[0], dtype)
    At = np.zeros((V.shape[1], Q.shape[0]), dtype)                   # (d_v, m): O^T before dividing
    visited = blocks_visited(seq_len, block)
    for b in range(visited):
        lo = b * block
        Kt_blk = K[lo:lo + block].astype(dtype, copy=False)          # (n, d): block rows of (K^T)^T
        Vt_blk = V[lo:lo + block].astype(dtype, copy=False).T        # (d_v, n): block columns of V^T
        rows = np.arange(lo, lo + Kt_blk.shape[0])
        with _garbage_allowed(rows[-1] >= seq_len):
            St = (Kt_blk @ Qt) * scale                               # (n, m): block rows of S^T
        if rows[-1] > positions[0]:
            St = np.where(rows[:, None] <= positions[None, :], St, -np.inf)
            if rows[-1] >= seq_len:
                Vt_blk = Vt_blk.copy()
                Vt_blk[:, seq_len - lo:] = 0
        M_new = np.maximum(M, St.max(axis=0))
        Pt = np.exp(St - M_new[None, :])                             # (n, m)
        rescale = np.exp(M - M_new)
        l = rescale * l + Pt.sum(axis=0)
        At = rescale[None, :] * At + Vt_blk @ Pt                     # (d_v, n) @ (n, m)
        M = M_new
    return (At / l[None, :]).T, visited


# ---------------------------------------------------------------- split-K (Flash-Decoding)


def split_ranges(seq_len: int, block: int, splits: int) -> list[tuple[int, int]]:
    """The blocks 0 .. ceil(t / B) - 1 cut into at most ``splits`` runs of consecutive blocks,
    as equal as they can be: [(first block, end block), ...] (end excluded, none empty)."""
    visited = blocks_visited(seq_len, block)
    splits = min(_count(splits, "splits"), visited)
    edges = [visited * s // splits for s in range(splits + 1)]
    return [(edges[s], edges[s + 1]) for s in range(splits)]


def partial_decode(q, K_buf, V_buf, seq_len, block, first_block, end_block):
    """One chunk of split-K: blocks ``first_block`` .. ``end_block - 1`` walked on their own.

    -> (O_s (d_v,), L_s, visited): O_s the attention output over the chunk's keys alone and
    L_s = log sum_{j in chunk} exp(s_j), its log-sum-exp (the chunk's weight in the combine).
    """
    q = _array(q, "q", 1, "(d,)")
    K, V = _buffers(K_buf, V_buf, q.shape[0])
    seq_len, block = _length(seq_len, K.shape[0]), _count(block, "block")
    total = blocks_visited(seq_len, block)
    first_block = _count(first_block, "first_block", low=0)
    end_block = _count(end_block, "end_block", low=first_block + 1)
    if end_block > total:
        raise ValueError(f"end_block is {end_block} but seq_len = {seq_len} fills {total} blocks of {block}")
    blocks = _contiguous_blocks(K, V, block, first_block, end_block)
    state = list(_online(blocks, q[None, :], np.array([seq_len - 1]), seq_len, _dtype(q, K, V)))[-1]
    return state.output()[0], float(state.log_sum_exp()[0]), end_block - first_block


def combine_partials(outputs: Sequence[np.ndarray], log_sum_exps: Sequence[float]):
    """The exact combine of split-K: L = log sum_s exp(L_s), O = sum_s exp(L_s - L) O_s.

    ``outputs`` (S, d_v), ``log_sum_exps`` (S,) -> (O (d_v,), L).  Each chunk's output is a
    softmax-weighted average over its keys; exp(L_s - L) is the share of the whole softmax's
    mass that its keys hold, so the weighted sum of the averages is the average over all keys.
    """
    O = np.asarray(outputs)
    L_s = np.asarray(log_sum_exps, dtype=O.dtype if O.dtype.kind == "f" else np.float64)
    if O.ndim != 2 or L_s.shape != (O.shape[0],) or O.shape[0] < 1:
        raise ValueError(f"outputs must be (S, d_v) and log_sum_exps (S,) with S >= 1, got shapes "
                         f"{O.shape} and {L_s.shape}")
    top = L_s.max()
    L = top + np.log(np.exp(L_s - top).sum())
    return (np.exp(L_s - L)[:, None] * O).sum(axis=0), float(L)


def split_k_decode(q, K_buf, V_buf, seq_len, block, splits, *, workers: int = 1, pool=None):
    """``blocked_decode`` with the key axis split into ``splits`` chunks (``split_ranges``),
    each walked independently by ``partial_decode`` and combined by ``combine_partials``.

    ``workers`` > 1 runs the chunks in a pool of that many threads made for the call; ``pool``
    is an executor to use instead (one made once and reused, as a server would).  numpy's
    matrix products and exponentials release Python's lock while they compute, so the chunks'
    arithmetic runs on several cores at once; with ``workers`` = 1 and no pool they run one
    after the other.  -> (out (d_v,), visited), visited = ceil(t / B) as for ``blocked_decode``.
    """
    workers = _count(workers, "workers")
    ranges = split_ranges(seq_len, block, splits)

    def chunk(r):
        return partial_decode(q, K_buf, V_buf, seq_len, block, *r)
    if pool is not None and len(ranges) > 1:
        parts = list(pool.map(chunk, ranges))
    elif workers == 1 or len(ranges) == 1:
        parts = [chunk(r) for r in ranges]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(ranges))) as own:
            parts = list(own.map(chunk, ranges))
    out, _ = combine_partials([p[0] for p in parts], [p[1] for p in parts])
    return out, sum(p[2] for p in parts)


# ---------------------------------------------------------------- the paged walk


def _pools(K_pool, V_pool):
    K = _array(K_pool, "K_pool", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    V = _array(V_pool, "V_pool", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    if K.shape[:3] != V.shape[:3]:
        raise ValueError(f"K_pool has shape {K.shape} and V_pool {V.shape}: the same blocks, heads and "
                         "block size are needed")
    if min(K.shape[:3]) < 1:
        raise ValueError(f"K_pool has shape {K.shape}: every axis but head_dim needs at least one entry")
    return K, V


def _table(block_table, num_blocks: int, needed: int) -> list[int]:
    """The first ``needed`` entries of a block table, checked: ints naming blocks of the pool,
    none twice (two positions of one sequence never share a block)."""
    try:
        entries = list(block_table)
    except TypeError:
        raise ValueError(f"block_table must be a sequence of block numbers, got {type(block_table).__name__}") from None
    if len(entries) < needed:
        raise ValueError(f"block_table has {len(entries)} blocks but seq_len needs {needed}")
    used = []
    for i, b in enumerate(entries[:needed]):
        if isinstance(b, (bool, np.bool_)) or not isinstance(b, numbers.Integral):
            raise ValueError(f"block_table[{i}] must be an integer block number, got {b!r}")
        if not 0 <= int(b) < num_blocks:
            raise ValueError(f"block_table[{i}] is {int(b)}, not a block of the pool (0 to {num_blocks - 1})")
        used.append(int(b))
    if len(set(used)) != len(used):
        twice = next(b for b in used if used.count(b) > 1)
        raise ValueError(f"block_table names block {twice} twice")
    return used


def paged_decode(q, K_pool, V_pool, block_table, seq_len):
    """One decode step of every query head of a sequence whose cache lives in a paged pool.

    q (H, head_dim): the new token's query heads, H a multiple of kv_heads (query head h reads
    kv head h // (H / kv_heads): grouped-query attention; H = kv_heads is plain multi-head).
    K_pool, V_pool (num_blocks, kv_heads, block_size, head_dim): one layer's pool.
    block_table: the pool's block numbers of the sequence's blocks, in order (entries past
    ceil(t / block_size) are not read).  1 <= seq_len <= len(block_table) * block_size.
    -> (out (H, head_dim_v), visited): the loop of ``blocked_decode`` with the block size of the
    pool, reading block i of the sequence from ``K_pool[block_table[i]]``; visited =
    ceil(t / block_size).  Nothing is gathered into a contiguous copy.
    """
    q = _array(q, "q", 2, "(H, head_dim)")
    K, V = _pools(K_pool, V_pool)
    num_blocks, kv_heads, block_size, head_dim = K.shape
    if q.shape[1] != head_dim:
        raise ValueError(f"q has heads of width {q.shape[1]} but K_pool has head_dim {head_dim}")
    if q.shape[0] < 1 or q.shape[0] % kv_heads:
        raise ValueError(f"q has {q.shape[0]} heads: a multiple of K_pool's {kv_heads} kv heads is needed")
    try:
        capacity = len(block_table) * block_size
    except TypeError:
        raise ValueError(f"block_table must be a sequence of block numbers, got {type(block_table).__name__}") from None
    seq_len = _length(seq_len, capacity, f"block_table holds (blocks of {block_size})")
    visited = blocks_visited(seq_len, block_size)
    table = _table(block_table, num_blocks, visited)
    group = q.shape[0] // kv_heads
    Q = q.reshape(kv_heads, group, head_dim)                          # (G, group, d): a kv head's queries
    blocks = ((i, i * block_size, K[b], V[b]) for i, b in enumerate(table))   # K[b]: (G, block_size, d)
    state = list(_online(blocks, Q, np.full(group, seq_len - 1), seq_len, _dtype(q, K, V)))[-1]
    return state.output().reshape(q.shape[0], V.shape[3]), visited


def gather_pages(pool, block_table, seq_len) -> np.ndarray:
    """The first ``seq_len`` positions of a sequence copied out of a paged pool into a contiguous
    array (kv_heads, seq_len, head_dim): what the paged walk does **not** need to do, and what a
    test compares it with."""
    pool = _array(pool, "pool", 4, "(num_blocks, kv_heads, block_size, head_dim)")
    block_size = pool.shape[2]
    seq_len = _length(seq_len, len(block_table) * block_size, f"block_table holds (blocks of {block_size})")
    table = _table(block_table, pool.shape[0], blocks_visited(seq_len, block_size))
    rows = np.concatenate([pool[b] for b in table], axis=1)          # (G, blocks x block_size, d)
    return rows[:, :seq_len].copy()
