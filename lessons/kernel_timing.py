"""Timing the kernel of ``kvcache.kernel`` on this machine: the early exit, and split-K.

Two questions, answered by measurement:

* does the loop's early exit make a step's time follow ``seq_len`` rather than the buffer's
  ``max_seq_len``?  (``measure_early_exit``: the same loop with and without the exit, over one
  buffer, for lengths from 1/64 of it to all of it);
* does split-K pay, here?  (``measure_split_k``: one query over a context in one pass, then cut
  into chunks walked by a pool of threads and combined, for a short context, a long one, and one
  too large for the last-level cache, read from main memory.)

What to measure depends on the machine, so ``plan_split_k`` chooses it from the machine's facts
(``lessons.machine_facts.MachineFacts``): as many threads as usable cores (at most ``MAX_WORKERS``), at
least two chunks even on one core (where split-K can only cost), a context of ``LONG_POSITIONS``
positions unless the free memory is short, and a context ``BEYOND_FACTOR`` times the last-level
cache when the free memory holds it: cores that share a cache may not read it faster together,
while main memory often serves two cores faster than one.  ``choose_splits`` is the rule a serving engine
applies to decide whether to split at all.  Both are pure functions, tested on machines the
tests do not run on; no speed is ever asserted.

The threads: numpy releases Python's global lock inside a matrix product and an exponential of
a whole array, so chunks given to different threads compute on different cores at once.  Each
thread should then use one BLAS thread (``kvcache.blas.limit_blas_threads(1)`` before numpy is
loaded), or the chunks' products and the BLAS library's own threads compete for the same cores.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from kvcache.kernel import blocked_decode, full_buffer_decode, split_k_decode

from .bandwidth import ASSUMED_LLC_BYTES, repeated_random
from .machine_facts import MachineFacts
from .memory import GIB, format_bytes

__all__ = [
    "MAX_WORKERS", "LONG_POSITIONS", "SHORT_POSITIONS", "HEAD_DIM", "MIN_BLOCKS_PER_SPLIT", "BEYOND_FACTOR",
    "choose_splits", "block_for", "Context", "SplitKPlan", "plan_split_k", "describe_split_plan",
    "interleaved_best", "EarlyExitRow", "measure_early_exit", "SplitKRow", "SplitKResult", "measure_split_k",
    "split_k_sentence", "split_k_reading", "splitting_cost_sentence",
]

MAX_WORKERS = 8                 # threads, whatever the machine: the build stays light
LONG_POSITIONS = 65_536         # the long context: 64k positions
SHORT_POSITIONS = 1_024         # the short one
HEAD_DIM = 128
ITEMSIZE = 4                    # float32
BYTES_PER_POSITION = 2 * HEAD_DIM * ITEMSIZE      # a key and a value
MIN_POSITIONS = 4_096           # never a "long" context shorter than this
MEMORY_SHARE = 8                # at most an eighth of the free memory...
MAX_BYTES = 2 * GIB             # ...and never more than this
ASSUMED_FREE_BYTES = GIB        # where Linux does not say
BEYOND_FACTOR = 2               # a context this many times the last-level cache is read from memory
MIN_BLOCKS_PER_SPLIT = 4        # a chunk shorter than this many blocks is not worth a thread
MAX_BLOCK = 8_192
NOISE = 0.15                    # a ratio within 15% of 1 is noise on a shared machine (coursebook.NOISE)


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


def block_for(positions: int, splits: int) -> int:
    """The block a context is walked in: the largest power of two up to ``MAX_BLOCK`` that still
    gives each of ``splits`` chunks ``MIN_BLOCKS_PER_SPLIT`` blocks (at least 16)."""
    block = MAX_BLOCK
    while block > 16 and positions // block < splits * MIN_BLOCKS_PER_SPLIT:
        block //= 2
    return block


@dataclass(frozen=True)
class Context:
    """One context the split-K measurement times: ``positions`` of K and V (``cache_bytes``),
    walked in blocks of ``block``; ``where`` says where its bytes come from."""

    name: str              # "short", "long" or "memory"
    positions: int
    block: int
    where: str             # "inside the last-level cache" or "beyond the last-level cache"

    @property
    def cache_bytes(self) -> int:
        return self.positions * BYTES_PER_POSITION

    @property
    def source(self) -> str:
        """Where a step reads K and V from: "the cache" or "main memory"."""
        return "main memory" if self.where.startswith("beyond") else "the cache"

    @property
    def label(self) -> str:
        return {"memory": "context read from main memory"}.get(self.name, f"{self.name} context")


@dataclass(frozen=True)
class SplitKPlan:
    """What the chapter measures for split-K on one machine (``plan_split_k``).

    ``workers`` threads walk ``splits`` chunks of each of ``contexts`` (one query, float32,
    ``head_dim`` numbers per key and value).  ``cores`` is the usable cores Linux reported (None:
    unknown, one assumed), ``llc_bytes`` its last-level cache (``llc_known`` False: assumed).
    ``budget_bytes`` bounds the arrays, ``budget_reason`` says why it is that much; ``beyond_note``
    says why no context beyond the last-level cache is measured, when none is.
    """

    cores: int | None
    workers: int
    splits: int
    head_dim: int
    repeats: int
    llc_bytes: int
    llc_known: bool
    budget_bytes: int
    budget_reason: str
    contexts: tuple[Context, ...]
    beyond_note: str

    @property
    def parallel(self) -> bool:
        """True when the chunks can run on more than one core."""
        return self.workers > 1

    def context(self, name: str) -> Context | None:
        return next((c for c in self.contexts if c.name == name), None)

    @property
    def peak_bytes(self) -> int:
        return max(c.cache_bytes for c in self.contexts)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def plan_split_k(facts: MachineFacts) -> SplitKPlan:
    """Choose the split-K measurement from the machine's facts (a pure function).

    Threads: the usable cores, at least 1 and at most ``MAX_WORKERS``; chunks: as many as
    threads, and at least 2 (on one core the chunks take turns, which shows what splitting
    costs).  Contexts: a short one (``SHORT_POSITIONS``); the long one, ``LONG_POSITIONS``
    positions, halved until its K and V fit the budget (an eighth of the free memory, at most
    ``MAX_BYTES``; never below ``MIN_POSITIONS``); and, when the budget holds it, the shortest
    power of two of positions whose K and V are ``BEYOND_FACTOR`` times the last-level cache, so
    that they are read from main memory (an unknown cache is taken as ``ASSUMED_LLC_BYTES``).
    """
    cores = facts.usable_cpus if facts.usable_cpus and facts.usable_cpus > 0 else None
    workers = max(1, min(cores or 1, MAX_WORKERS))
    splits = max(2, workers)
    llc_known = bool(facts.llc_bytes)
    llc = int(facts.llc_bytes) if llc_known else ASSUMED_LLC_BYTES
    free = facts.free_memory_bytes
    share = (free if free is not None else ASSUMED_FREE_BYTES) // MEMORY_SHARE
    if share < MAX_BYTES:
        budget = share
        reason = (f"an eighth of the {format_bytes(free)} of memory free" if free is not None
                  else f"an eighth of the {format_bytes(ASSUMED_FREE_BYTES)} assumed free, since Linux did not say")
    else:
        budget, reason = MAX_BYTES, "the most this measurement ever holds, so that the build stays quick"

    def where(positions):
        return ("beyond the last-level cache" if positions * BYTES_PER_POSITION > llc
                else "inside the last-level cache")

    positions = LONG_POSITIONS
    while positions > MIN_POSITIONS and positions * BYTES_PER_POSITION > budget:
        positions //= 2
    contexts = [Context("short", SHORT_POSITIONS, block_for(SHORT_POSITIONS, splits), where(SHORT_POSITIONS)),
                Context("long", positions, block_for(positions, splits), where(positions))]
    beyond = _pow2_at_least(-(-BEYOND_FACTOR * llc // BYTES_PER_POSITION))
    note = ""
    if positions * BYTES_PER_POSITION >= BEYOND_FACTOR * llc:
        note = "the long context is already read from main memory"
    elif beyond * BYTES_PER_POSITION <= budget:
        contexts.append(Context("memory", beyond, block_for(beyond, splits), where(beyond)))
    else:
        note = (f"a context read from main memory ({BEYOND_FACTOR} times the {format_bytes(llc)} last-level "
                f"cache, {format_bytes(beyond * BYTES_PER_POSITION)}) would not fit in "
                f"{format_bytes(budget)} ({reason})")
    return SplitKPlan(cores=cores, workers=workers, splits=splits, head_dim=HEAD_DIM, repeats=7,
                      llc_bytes=llc, llc_known=llc_known, budget_bytes=budget, budget_reason=reason,
                      contexts=tuple(contexts), beyond_note=note)


def describe_split_plan(plan: SplitKPlan) -> list[tuple[str, str]]:
    """(what, on this machine) rows of what the plan measures and why, for a page's table."""
    cores = f"{plan.cores}" if plan.cores is not None else "unknown (one assumed)"
    llc = format_bytes(plan.llc_bytes) + ("" if plan.llc_known else " (assumed: Linux does not say)")
    rows = [
        ("usable cores", cores),
        ("threads walking chunks", f"{plan.workers}" + ("" if plan.parallel else ": the chunks take turns")),
        ("chunks (splits)", f"{plan.splits}"),
        ("last-level cache", llc),
    ]
    for c in plan.contexts:
        shortened = (f"; fewer than {LONG_POSITIONS:,}: {plan.budget_reason}"
                     if c.name == "long" and c.positions < LONG_POSITIONS else "")
        rows.append((c.label, f"{c.positions:,} positions, K and V {format_bytes(c.cache_bytes)}, "
                                          f"{c.where}, blocks of {c.block:,}{shortened}"))
    if plan.beyond_note:
        rows.append(("context read from main memory", plan.beyond_note))
    rows.append(("the most the measurement holds", f"{format_bytes(plan.budget_bytes)} ({plan.budget_reason})"))
    return rows


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
class SplitKRow:
    """Seconds per decode step over one context, the fastest sample of each."""

    context: Context
    one_pass_s: float          # blocked_decode
    split_s: float             # split-K, chunks in the plan's threads, then the combine
    split_serial_s: float      # the same chunks one after the other: what splitting costs
    max_difference: float      # |split-K - one pass|, largest entry

    @property
    def speedup(self) -> float:
        return self.one_pass_s / self.split_s

    @property
    def overhead(self) -> float:
        """Time of the chunks taken in turn over one pass (above 1: the cost of splitting)."""
        return self.split_serial_s / self.one_pass_s


@dataclass(frozen=True)
class SplitKResult:
    plan: SplitKPlan
    rows: tuple[SplitKRow, ...]

    def row(self, name: str) -> SplitKRow | None:
        return next((r for r in self.rows if r.context.name == name), None)


def _filled(rng, positions: int, head_dim: int):
    """q, K, V in float32; K and V are one block of random numbers repeated (drawing gigabytes
    of random numbers would take longer than the measurement, and a step's time depends only
    on how many bytes it reads)."""
    q = rng.standard_normal(head_dim, dtype=np.float32)
    K = repeated_random(positions, head_dim, np.float32, rng)
    return q, K, repeated_random(positions, head_dim, np.float32, rng)


def measure_split_k(plan: SplitKPlan, rng_key: int = 0) -> SplitKResult:
    """Run ``plan``: one query over each context in one pass, with split-K (one pool of
    ``plan.workers`` threads, made once and reused by every sample) and with the same chunks in
    turn.  One context's arrays are held at a time."""
    rng = np.random.default_rng(rng_key)
    rows = []
    with ThreadPoolExecutor(max_workers=plan.workers) as pool:
        for c in plan.contexts:
            q, K, V = _filled(rng, c.positions, plan.head_dim)
            T, B, S = c.positions, c.block, plan.splits
            best = interleaved_best({
                "one": lambda: blocked_decode(q, K, V, T, B),
                "split": lambda: split_k_decode(q, K, V, T, B, S, pool=pool),
                "serial": lambda: split_k_decode(q, K, V, T, B, S),
            }, plan.repeats)
            out, _ = split_k_decode(q, K, V, T, B, S, pool=pool)
            difference = float(np.max(np.abs(out - blocked_decode(q, K, V, T, B)[0])))
            rows.append(SplitKRow(c, best["one"], best["split"], best["serial"], difference))
            del q, K, V
    return SplitKResult(plan, tuple(rows))


def split_k_sentence(result: SplitKResult) -> str:
    """What the measurement found, in words that hold whichever way it went."""
    plan = result.plan
    if not plan.parallel:
        return ("this build could use one core only, so the chunks took turns: what split-K shows here is its "
                "cost, not its gain")
    parts = []
    for r in result.rows:
        c = r.context
        verdict = ("paid" if r.speedup > 1 + NOISE else "lost" if r.speedup < 1 / (1 + NOISE) else
                   "made little difference")
        parts.append(f"over the {c.label} ({c.positions:,} positions, {format_bytes(c.cache_bytes)} of K and V, "
                     f"{c.where}) it {verdict}, a ratio of {r.speedup:.2f}")
    return (f"with {plan.workers} threads on {plan.cores} usable cores, " + "; ".join(parts))


def split_k_reading(result: SplitKResult) -> str:
    """What the pattern of the measurement suggests, in words that follow what was found: which
    of the long contexts gained from a second reader of memory, and what that says here."""
    plan = result.plan
    if not plan.parallel:
        return "A machine with more cores would show the other side."
    long_row, memory_row = result.row("long"), result.row("memory")
    long_gained = long_row is not None and long_row.speedup > 1 + NOISE
    if memory_row is None:
        where = ("" if not plan.beyond_note else f" No context read from main memory was measured: {plan.beyond_note}.")
        if long_gained:
            return "The long context gained: one core alone did not read it as fast as two." + where
        return ("The long context did not gain: one core read it about as fast as two could, or the other cores "
                "were busy." + where)
    memory_gained = memory_row.speedup > 1 + NOISE
    if memory_gained and not long_gained:
        return ("Only the context read from main memory gained: one core could not draw all of main memory's "
                "bandwidth, while the cores share the last-level cache, and two of them did not read it faster "
                "than one.")
    if memory_gained and long_gained:
        return "Both long contexts gained: one core could not keep up with the cache or with main memory."
    if long_gained:
        return ("The long context gained but the one read from main memory did not: one core already drew what "
                "main memory could give.")
    cached_long = long_row is not None and long_row.context.where.startswith("inside")
    return ("Neither long context gained: two threads read " +
            ("neither the last-level cache nor main memory" if cached_long else "main memory no") +
            " faster than one did, or the other cores were busy with other work.")


def splitting_cost_sentence(row: SplitKRow, noise: float = NOISE) -> str:
    """What walking the chunks of ``row`` in turn, against one pass, says about the cost of
    splitting, in words that follow the measurement: a price when the chunks took longer than
    the noise allows, none measured when they did not (or were faster)."""
    x = row.overhead
    if x > 1 + noise:
        return f"cost {x:.2f} times one pass: the price of splitting itself"
    if x >= 1 / (1 + noise):
        return (f"cost {x:.2f} times one pass, a difference inside the noise: no price of splitting was "
                "measured")
    return f"took {x:.2f} times one pass, less than one pass: no price of splitting was measured"
