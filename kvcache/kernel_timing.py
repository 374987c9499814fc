"""Timing the kernel of ``kvcache.kernel`` on this machine: the early exit, and split-K.

Two questions, answered by measurement:

* does the loop's early exit make a step's time follow ``seq_len`` rather than the buffer's
  ``max_seq_len``?  (``measure_early_exit``: the same loop with and without the exit, over one
  buffer, for lengths from 1/64 of it to all of it);
* does split-K pay, here?  (``measure_split_k``: one query over a long context in one pass, then
  cut into chunks walked by a pool of threads and combined; then the same over a short context.)

What to measure depends on the machine, so ``plan_split_k`` chooses it from the machine's facts
(``kvcache.machine.MachineFacts``): as many threads as usable cores (at most ``MAX_WORKERS``), a
context of ``LONG_POSITIONS`` positions unless the free memory is short, and at least two chunks
even on one core, where split-K can only cost.  ``choose_splits`` is the rule a serving engine
applies to decide whether to split at all.  Both are pure functions, tested on machines the
tests do not run on; no speed is ever asserted.

The threads: numpy releases Python's global lock inside a matrix product and an exponential of
a whole array, so chunks given to different threads compute on different cores at once.  Each
thread should then use one BLAS thread (``kvcache.machine.limit_blas_threads(1)`` before numpy is
loaded), or the chunks' products and the BLAS library's own threads compete for the same cores.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .kernel import blocked_decode, full_buffer_decode, split_k_decode
from .machine import MachineFacts
from .memory import GIB, MIB, format_bytes

__all__ = [
    "MAX_WORKERS", "LONG_POSITIONS", "SHORT_POSITIONS", "HEAD_DIM",
    "choose_splits", "SplitKPlan", "plan_split_k", "describe_split_plan",
    "interleaved_best", "EarlyExitRow", "measure_early_exit", "SplitKResult", "measure_split_k",
    "split_k_sentence",
]

MAX_WORKERS = 8                 # threads, whatever the machine: the build stays light
LONG_POSITIONS = 65_536         # the long context: 64k positions
SHORT_POSITIONS = 1_024         # the short one
HEAD_DIM = 128
ITEMSIZE = 4                    # float32
MIN_POSITIONS = 4_096           # never a "long" context shorter than this
MEMORY_SHARE = 8                # at most an eighth of the free memory...
MAX_BYTES = 256 * MIB           # ...and never more than this
ASSUMED_FREE_BYTES = GIB        # where Linux does not say
MIN_BLOCKS_PER_SPLIT = 4        # a chunk shorter than this many blocks is not worth a thread


def choose_splits(parallel_units: int, seq_len: int, block: int, cores: int,
                  min_blocks_per_split: int = MIN_BLOCKS_PER_SPLIT) -> int:
    """How many chunks to cut each query's keys into (1: do not split).

    ``parallel_units`` independent (sequence, head) pairs already give that much parallel work.
    When they fill the ``cores`` (GPU multiprocessors, or CPU cores), splitting adds only the
    combine; otherwise cut each into ceil(cores / units) chunks, but never into chunks of fewer
    than ``min_blocks_per_split`` blocks of ``block`` positions (a short context stays whole).
    """
    for name, value in (("parallel_units", parallel_units), ("seq_len", seq_len), ("block", block),
                        ("cores", cores), ("min_blocks_per_split", min_blocks_per_split)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if parallel_units >= cores:
        return 1
    blocks = -(-seq_len // block)
    return max(1, min(-(-cores // parallel_units), blocks // min_blocks_per_split))


@dataclass(frozen=True)
class SplitKPlan:
    """What the chapter measures for split-K on one machine (``plan_split_k``).

    ``workers`` threads walk ``splits`` chunks of a ``positions``-long context (K and V of
    ``head_dim`` float32 numbers per position, ``cache_bytes`` in all), blocks of ``block``
    positions; the short context has ``short_positions``.  ``cores`` is the usable cores Linux
    reported (None: unknown, one assumed).  ``budget_bytes`` bounds the arrays, ``budget_reason``
    says why it is that much.
    """

    cores: int | None
    workers: int
    splits: int
    positions: int
    short_positions: int
    head_dim: int
    block: int
    repeats: int
    budget_bytes: int
    budget_reason: str

    @property
    def cache_bytes(self) -> int:
        return 2 * self.positions * self.head_dim * ITEMSIZE

    @property
    def parallel(self) -> bool:
        """True when the chunks can run on more than one core."""
        return self.workers > 1


def plan_split_k(facts: MachineFacts) -> SplitKPlan:
    """Choose the split-K measurement from the machine's facts (a pure function).

    Threads: the usable cores, at least 1 and at most ``MAX_WORKERS``; chunks: as many as
    threads, and at least 2 (on one core the chunks take turns, which shows what splitting
    costs).  The long context is ``LONG_POSITIONS`` positions, halved until its K and V fit in
    an eighth of the free memory and ``MAX_BYTES`` (never below ``MIN_POSITIONS``).  Blocks are
    the largest power of two up to 2048 that gives each chunk ``MIN_BLOCKS_PER_SPLIT`` blocks.
    """
    cores = facts.usable_cpus if facts.usable_cpus and facts.usable_cpus > 0 else None
    workers = max(1, min(cores or 1, MAX_WORKERS))
    splits = max(2, workers)
    free = facts.free_memory_bytes
    share = (free if free is not None else ASSUMED_FREE_BYTES) // MEMORY_SHARE
    if share < MAX_BYTES:
        budget = share
        reason = (f"an eighth of the {format_bytes(free)} of memory free" if free is not None
                  else f"an eighth of the {format_bytes(ASSUMED_FREE_BYTES)} assumed free, since Linux did not say")
    else:
        budget, reason = MAX_BYTES, "the most this measurement ever holds, so that the build stays quick"
    positions = LONG_POSITIONS
    while positions > MIN_POSITIONS and 2 * positions * HEAD_DIM * ITEMSIZE > budget:
        positions //= 2
    block = 2048
    while block > 64 and positions // block < splits * MIN_BLOCKS_PER_SPLIT:
        block //= 2
    return SplitKPlan(cores=cores, workers=workers, splits=splits, positions=positions,
                      short_positions=SHORT_POSITIONS, head_dim=HEAD_DIM, block=block, repeats=7,
                      budget_bytes=budget, budget_reason=reason)


def describe_split_plan(plan: SplitKPlan) -> list[tuple[str, str]]:
    """(what, on this machine) rows of what the plan measures and why, for a page's table."""
    cores = f"{plan.cores}" if plan.cores is not None else "unknown (one assumed)"
    return [
        ("usable cores", cores),
        ("threads walking chunks", f"{plan.workers}" + ("" if plan.parallel else ": the chunks take turns")),
        ("chunks (splits)", f"{plan.splits}"),
        ("long context", f"{plan.positions:,} positions, K and V {format_bytes(plan.cache_bytes)} in float32"
                         + ("" if plan.positions == LONG_POSITIONS else f" (less than {LONG_POSITIONS:,}: "
                                                                       f"{plan.budget_reason})")),
        ("short context", f"{plan.short_positions:,} positions"),
        ("block", f"{plan.block:,} positions"),
        ("the most the measurement holds", f"{format_bytes(plan.budget_bytes)} ({plan.budget_reason})"),
    ]


# ---------------------------------------------------------------- timing


def interleaved_best(fns: dict, repeats: int = 7, min_sample: float = 2e-3) -> dict:
    """The fastest sample of each function, sampled in turn (A, B, C, A, B, C, ...) so that a
    change in the machine's load touches them all alike.  Each sample repeats its call until it
    lasts ``min_sample`` seconds.  {name: seconds per call}."""
    numbers = {}
    for name, fn in fns.items():
        fn()                                              # warm up
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-9)
        numbers[name] = int(min(1000, max(1, math.ceil(min_sample / once))))
    best = {name: math.inf for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(numbers[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / numbers[name])
    return best


def _buffers(rng, positions: int, head_dim: int):
    q = rng.standard_normal(head_dim, dtype=np.float32)
    K = rng.standard_normal((positions, head_dim), dtype=np.float32)
    V = rng.standard_normal((positions, head_dim), dtype=np.float32)
    return q, K, V


@dataclass(frozen=True)
class EarlyExitRow:
    seq_len: int
    fraction: float
    visited: int               # blocks, with the early exit
    visited_full: int          # blocks, without it
    exit_s: float
    full_s: float


def measure_early_exit(max_seq_len: int = 16_384, block: int = 256, head_dim: int = HEAD_DIM,
                       fractions=(1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1), repeats: int = 5,
                       rng_key: int = 0) -> list[EarlyExitRow]:
    """``blocked_decode`` (early exit) and ``full_buffer_decode`` (every block, masked past t)
    over one float32 buffer of ``max_seq_len`` rows, for seq_len = each fraction of it."""
    q, K, V = _buffers(np.random.default_rng(rng_key), max_seq_len, head_dim)
    rows = []
    for f in fractions:
        t = max(1, int(round(max_seq_len * f)))
        _, visited = blocked_decode(q, K, V, t, block)
        _, visited_full = full_buffer_decode(q, K, V, t, block)
        best = interleaved_best({"exit": lambda: blocked_decode(q, K, V, t, block),
                                 "full": lambda: full_buffer_decode(q, K, V, t, block)}, repeats)
        rows.append(EarlyExitRow(t, t / max_seq_len, visited, visited_full, best["exit"], best["full"]))
    return rows


@dataclass(frozen=True)
class SplitKResult:
    """Seconds per decode step, the fastest sample of each (``measure_split_k``)."""

    plan: SplitKPlan
    one_pass_s: float          # blocked_decode over the long context
    split_s: float             # split-K, chunks in ``plan.workers`` threads, then the combine
    split_serial_s: float      # the same chunks one after the other: what splitting costs
    short_one_pass_s: float
    short_split_s: float
    max_difference: float      # |split-K - one pass|, largest entry, long context

    @property
    def speedup(self) -> float:
        return self.one_pass_s / self.split_s

    @property
    def short_speedup(self) -> float:
        return self.short_one_pass_s / self.short_split_s

    @property
    def overhead(self) -> float:
        """Time of the chunks taken in turn over one pass (above 1: the cost of splitting)."""
        return self.split_serial_s / self.one_pass_s


def measure_split_k(plan: SplitKPlan, rng_key: int = 0) -> SplitKResult:
    """Run ``plan``: one query over the long context in one pass and with split-K (one pool of
    ``plan.workers`` threads, made once, reused by every sample), then over the short context."""
    rng = np.random.default_rng(rng_key)
    q, K, V = _buffers(rng, plan.positions, plan.head_dim)
    qs, Ks, Vs = _buffers(rng, plan.short_positions, plan.head_dim)
    short_block = max(16, plan.short_positions // (plan.splits * MIN_BLOCKS_PER_SPLIT))
    T, B, t, b = plan.positions, plan.block, plan.short_positions, short_block
    with ThreadPoolExecutor(max_workers=plan.workers) as pool:
        best = interleaved_best({
            "one": lambda: blocked_decode(q, K, V, T, B),
            "split": lambda: split_k_decode(q, K, V, T, B, plan.splits, pool=pool),
            "serial": lambda: split_k_decode(q, K, V, T, B, plan.splits),
            "short_one": lambda: blocked_decode(qs, Ks, Vs, t, b),
            "short_split": lambda: split_k_decode(qs, Ks, Vs, t, b, plan.splits, pool=pool),
        }, plan.repeats)
        out, _ = split_k_decode(q, K, V, T, B, plan.splits, pool=pool)
    difference = float(np.max(np.abs(out - blocked_decode(q, K, V, T, B)[0])))
    return SplitKResult(plan, best["one"], best["split"], best["serial"], best["short_one"],
                        best["short_split"], difference)


def split_k_sentence(result: SplitKResult) -> str:
    """What the measurement found, in words that hold whichever way it went."""
    plan = result.plan
    if not plan.parallel:
        where = ("this build could use one core only, so the chunks took turns: what split-K shows here "
                 "is its cost, not its gain")
    elif result.speedup >= 1.15:
        where = (f"with {plan.workers} threads on {plan.cores} usable cores, splitting paid: the chunks' "
                 "arithmetic ran on several cores at once")
    elif result.speedup > 1 / 1.15:
        where = (f"with {plan.workers} threads on {plan.cores} usable cores, splitting gained little here: the "
                 "step reads memory more than it computes, the cores share that memory's bandwidth, and the "
                 "machine that built the page may have been running other work")
    else:
        where = (f"with {plan.workers} threads on {plan.cores} usable cores, splitting lost here: handing the "
                 "chunks to threads and combining them cost more than the other cores gave (they may have been "
                 "busy with other work)")
    return where
