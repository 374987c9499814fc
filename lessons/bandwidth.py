"""Measure, on this machine, how fast memory moves and how fast a decode step reads its cache.

Two measurements, both with numpy on the CPU:

* ``copy_bandwidth``: copy a large array and count the bytes read plus the bytes written,
  divided by the time of the copy (median of a few repeats).  This is about the best a plain
  numpy program can move data through main memory.
* ``measure_decode_attention``: one decode step of attention, one query of width d against
  cached K and V of T tokens, for caches from well inside the last-level cache to well beyond
  it.  Its time against the cache's bytes gives the bandwidth the step achieves.

What to measure depends on the machine: data that fits in the last-level cache is read from
there, so a measurement of main memory needs arrays several times larger than that cache, and
they must fit in the memory that is free.  ``plan_measurements`` chooses the sizes from the
machine's facts (``lessons.machine_facts``) and never more than a bounded amount of memory and time;
``summarize`` turns the measurements into the figures and sentences a page states, saying so
when the cache could not be exceeded by enough.  Both are pure functions, tested on machines
the tests do not run on.

Nothing here asserts a speed: the numbers belong to the machine that ran it.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from .decode_timing import median_time
from .machine_facts import MachineFacts
from .memory import GIB, KIB, MIB, format_bytes

__all__ = [
    "repeated_random", "CopyMeasurement", "copy_bandwidth",
    "decode_attention", "StepMeasurement", "measure_decode_attention", "achieved_bandwidth_beyond",
    "MeasurementPlan", "plan_measurements", "describe_plan", "plan_sentence", "measure", "Findings",
    "summarize",
]


@dataclass(frozen=True)
class CopyMeasurement:
    """A timed ``np.copyto`` of ``nbytes`` bytes: ``2 * nbytes`` moved (read + write)."""

    nbytes: int
    seconds: tuple[float, ...]

    @property
    def bytes_moved(self) -> int:
        return 2 * self.nbytes

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def bandwidth(self) -> float:
        """Bytes per second: (bytes read + bytes written) / median time."""
        return self.bytes_moved / self.median_seconds

    @property
    def best_bandwidth(self) -> float:
        """Bytes per second of the fastest copy: what the machine showed it can do, the speed a
        floor under another time is computed from (other programs can only slow a copy down)."""
        return self.bytes_moved / min(self.seconds)


def copy_bandwidth(nbytes: int = 256 * MIB, repeats: int = 5) -> CopyMeasurement:
    """Time copying one array of ``nbytes`` bytes into another, ``repeats`` times after a warm-up."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: the first touch of ``dst`` also maps its pages
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        seconds.append(time.perf_counter() - start)
    return CopyMeasurement(src.nbytes, tuple(seconds))


def decode_attention(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """One decode step of attention for one head: softmax(K q / sqrt(d)) V.

    ``q`` has shape (d,), ``K`` and ``V`` shape (T, d).  Reads all of K and V once.  The two
    products use ``np.einsum``, which runs on one thread, like the copy of ``copy_bandwidth``
    (numpy's ``@`` calls a BLAS library that may use several threads).
    """
    scores = np.einsum("td,d->t", K, q)
    scores *= 1.0 / math.sqrt(q.shape[0])
    scores -= scores.max()
    np.exp(scores, out=scores)
    scores /= scores.sum()
    return np.einsum("t,td->d", scores, V)


@dataclass(frozen=True)
class StepMeasurement:
    """The median time of one decode step over a cache of ``n_tokens`` tokens."""

    n_tokens: int
    head_dim: int
    itemsize: int
    seconds: float

    @property
    def cache_bytes(self) -> int:
        """Bytes of K and V together: 2 * T * d * itemsize."""
        return 2 * self.n_tokens * self.head_dim * self.itemsize

    @property
    def bandwidth(self) -> float:
        """Cache bytes read per second (the query, scores and output are not counted)."""
        return self.cache_bytes / self.seconds


def repeated_random(n_tokens: int, head_dim: int, dtype, rng) -> np.ndarray:
    """A (n_tokens, head_dim) table of uniform random numbers: one 1 MiB block drawn, then
    repeated (drawing gigabytes of random numbers would take seconds, and a step's time does not
    depend on the values, only on the bytes it reads)."""
    out = np.empty((n_tokens, head_dim), dtype=dtype)
    flat = out.reshape(-1)
    block = rng.random(min(flat.size, MIB // 4), dtype=np.float32).astype(dtype, copy=False)
    for start in range(0, flat.size, block.size):
        chunk = flat[start:start + block.size]
        chunk[...] = block[:chunk.size]
    return out


def _time_steps(q, K_all, V_all, tokens_and_repeats, min_seconds) -> list[StepMeasurement]:
    out = []
    for t, r in sorted(tokens_and_repeats):
        K, V = K_all[:t], V_all[:t]
        seconds = median_time(lambda: decode_attention(q, K, V), r, min_sample=min_seconds)
        out.append(StepMeasurement(t, K_all.shape[1], K_all.dtype.itemsize, seconds))
    return out


def measure_decode_attention(cache_mib=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), head_dim: int = 128,
                             dtype=np.float32, repeats=5, min_seconds: float = 0.01,
                             seed: int = 0, cache_bytes=None) -> list[StepMeasurement]:
    """Time ``decode_attention`` for caches (K and V together) of each size in ``cache_mib``
    (or, given ``cache_bytes``, of each of those sizes in bytes).

    One pair of K, V arrays for the largest size is filled once with random numbers (fixed
    seed); each smaller cache is its first T rows.  float32 by default: numpy has no fast
    float16 matrix-vector product, and a byte is a byte whichever type fills it.  ``repeats``
    is one count for every size or one per size (in the order given).
    """
    dtype = np.dtype(dtype)
    per_token = 2 * head_dim * dtype.itemsize
    wanted = [int(b) for b in cache_bytes] if cache_bytes is not None else [int(m * MIB) for m in cache_mib]
    counts = [repeats] * len(wanted) if isinstance(repeats, int) else list(repeats)
    if len(counts) != len(wanted):
        raise ValueError(f"{len(counts)} repeat counts for {len(wanted)} sizes")
    plan = [(max(1, b // per_token), r) for b, r in zip(wanted, counts)]
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(head_dim).astype(dtype)
    T = max(t for t, _ in plan)
    K_all, V_all = repeated_random(T, head_dim, dtype, rng), repeated_random(T, head_dim, dtype, rng)
    return _time_steps(q, K_all, V_all, plan, min_seconds)


def achieved_bandwidth_beyond(steps: list[StepMeasurement], threshold_bytes: int) -> float:
    """Median bandwidth of the steps whose cache is at least ``threshold_bytes``."""
    chosen = [s.bandwidth for s in steps if s.cache_bytes >= threshold_bytes]
    if not chosen:
        raise ValueError("no measurement is that large")
    return statistics.median(chosen)


# ---------------------------------------------------------------- what to measure on this machine

ASSUMED_LLC_BYTES = 32 * MIB       # where Linux does not say (no /sys): a common size, and said so
BEYOND_FACTOR = 4                  # caches this many times the last-level cache come from memory
TOP_FACTOR = 16                    # the largest cache wanted: 16 x the last-level cache...
MIN_TOP_BYTES = 64 * MIB           # ...but at least this much (a small cache still gets a curve)
MAX_BYTES = 4 * GIB                # never more than this at once, whatever the machine
MEMORY_SHARE = 4                   # and never more than a quarter of the free memory
ASSUMED_FREE_BYTES = 2 * GIB       # where the free memory is unknown
SMALLEST_BYTES = 64 * KIB
COPY_MIN_BYTES = 256 * MIB
COPY_MAX_BYTES = GIB
LARGE_BYTES = GIB                  # caches above this are timed 3 times, smaller ones 5 times


@dataclass(frozen=True)
class MeasurementPlan:
    """What chapter 4 measures on one machine, chosen by ``plan_measurements``.

    ``cache_sizes`` are the decode-step caches (K and V together, ascending) and ``repeats`` the
    timed samples of each; ``copy_bytes`` is the size of each of the copy's two arrays.  Sizes of
    at least ``beyond_bytes`` (``BEYOND_FACTOR`` x the last-level cache) are read from main memory,
    sizes of at most ``inside_bytes`` (a quarter of it) stay in the cache.  ``budget_bytes`` is the
    most memory the measurement holds at once, ``budget_reason`` why it is that much.
    """

    llc_bytes: int
    llc_known: bool
    free_bytes: int | None
    budget_bytes: int
    budget_reason: str
    copy_bytes: int
    cache_sizes: tuple[int, ...]
    repeats: tuple[int, ...]
    beyond_bytes: int
    inside_bytes: int

    @property
    def largest(self) -> int:
        return self.cache_sizes[-1]

    @property
    def status(self) -> str:
        """"beyond": the largest caches are at least BEYOND_FACTOR x the last-level cache;
        "short": larger than the cache, but not by that much; "inside": all fit in it."""
        if self.largest >= self.beyond_bytes:
            return "beyond"
        return "short" if self.largest > self.llc_bytes else "inside"

    @property
    def peak_bytes(self) -> int:
        """The most memory held at once: the largest K and V (the copy runs inside them)."""
        return self.largest

    @property
    def bytes_touched(self) -> int:
        """Bytes written and read in all, an upper bound of the work (and so of the time): the
        arrays filled once, every size read on each of its samples and two warm-up calls, and
        the copy's six passes (read and write)."""
        steps = sum(size * (r + 2) for size, r in zip(self.cache_sizes, self.repeats))
        return self.largest + steps + 2 * self.copy_bytes * 6


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def measure(plan: "MeasurementPlan", head_dim: int = 128, dtype=np.float32, min_seconds: float = 0.01,
            seed: int = 0, copy_repeats: int = 5) -> tuple[list[StepMeasurement], CopyMeasurement]:
    """Run ``plan``: time the decode step over each of its caches, then the copy.

    The copy reuses the largest cache's arrays (its first ``plan.copy_bytes`` of K copied into V,
    once the steps are timed), so the measurement never holds more than ``plan.peak_bytes``.
    """
    dtype = np.dtype(dtype)
    per_token = 2 * head_dim * dtype.itemsize
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(head_dim).astype(dtype)
    tokens = [(max(1, b // per_token), r) for b, r in zip(plan.cache_sizes, plan.repeats)]
    T = max(t for t, _ in tokens)
    K_all, V_all = repeated_random(T, head_dim, dtype, rng), repeated_random(T, head_dim, dtype, rng)
    steps = _time_steps(q, K_all, V_all, tokens, min_seconds)
    n = min(plan.copy_bytes, K_all.nbytes) // K_all.itemsize
    src, dst = K_all.reshape(-1)[:n], V_all.reshape(-1)[:n]
    np.copyto(dst, src)                 # warm-up
    seconds = []
    for _ in range(copy_repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        seconds.append(time.perf_counter() - start)
    return steps, CopyMeasurement(src.nbytes, tuple(seconds))


def plan_measurements(facts: MachineFacts) -> MeasurementPlan:
    """Choose chapter 4's measurements from the machine's facts (a pure function).

    The largest cache is ``TOP_FACTOR`` x the last-level cache (at least ``MIN_TOP_BYTES``),
    rounded down to a power of two, within a budget: a quarter of the free memory, and never more
    than ``MAX_BYTES``; sizes halve from there down to an eighth of the last-level cache (or
    1 MiB, whichever is smaller).  The copy's arrays take twice the last-level cache each (at
    least ``COPY_MIN_BYTES``, at most ``COPY_MAX_BYTES``), inside the largest cache's K and V.
    Caches above ``LARGE_BYTES`` are timed 3 times, the others 5.  An unknown cache is taken as
    ``ASSUMED_LLC_BYTES``, an unknown free memory as ``ASSUMED_FREE_BYTES``; the plan records
    both, so the page can say so.
    """
    llc_known = bool(facts.llc_bytes)
    llc = int(facts.llc_bytes) if llc_known else ASSUMED_LLC_BYTES
    free = facts.free_memory_bytes
    share = (free if free is not None else ASSUMED_FREE_BYTES) // MEMORY_SHARE
    if share < MAX_BYTES:
        budget = max(SMALLEST_BYTES, share)
        reason = (f"a quarter of the {format_bytes(free)} of memory free" if free is not None
                  else f"a quarter of the {format_bytes(ASSUMED_FREE_BYTES)} assumed free, since Linux did not say")
    else:
        budget = MAX_BYTES
        reason = "the most the book's build ever holds, so that it stays quick"
    top = _pow2_floor(min(budget, max(TOP_FACTOR * llc, MIN_TOP_BYTES)))
    bottom = max(SMALLEST_BYTES, _pow2_floor(min(MIB, llc // 8)))
    sizes = []
    size = top
    while size >= bottom:
        sizes.append(size)
        size //= 2
    sizes = tuple(sorted(sizes)) or (top,)
    copy = min(max(COPY_MIN_BYTES, 2 * llc), top // 2, COPY_MAX_BYTES)  # inside K of the largest cache
    return MeasurementPlan(
        llc_bytes=llc, llc_known=llc_known, free_bytes=free, budget_bytes=budget, budget_reason=reason,
        copy_bytes=copy, cache_sizes=sizes, repeats=tuple(3 if s > LARGE_BYTES else 5 for s in sizes),
        beyond_bytes=BEYOND_FACTOR * llc, inside_bytes=llc // 4)


def describe_plan(plan: MeasurementPlan) -> list[tuple[str, str]]:
    """(what, on this machine) rows of what the plan measures and why, for a page's table."""
    free = format_bytes(plan.free_bytes) if plan.free_bytes is not None else "unknown"
    llc = format_bytes(plan.llc_bytes) + ("" if plan.llc_known else " (assumed: Linux does not say)")
    return [
        ("last-level cache", llc),
        ("memory free for this build", free),
        ("the most the measurement holds at once", f"{format_bytes(plan.budget_bytes)} ({plan.budget_reason})"),
        ("decode-step caches (K and V)", f"{format_bytes(plan.cache_sizes[0])} to {format_bytes(plan.largest)}, "
                                         f"{len(plan.cache_sizes)} sizes"),
        (f"read from main memory ({BEYOND_FACTOR} x the cache)", f"{format_bytes(plan.beyond_bytes)} and more"),
        ("copy", f"{format_bytes(plan.copy_bytes)} into another {format_bytes(plan.copy_bytes)}"),
    ]


def plan_sentence(plan: MeasurementPlan) -> str:
    """What the plan measures, in a sentence that holds for its status."""
    times = plan.largest / plan.llc_bytes
    span = f"The caches measured go from {format_bytes(plan.cache_sizes[0])} to {format_bytes(plan.largest)}"
    if plan.status == "beyond":
        return (f"{span}. The largest is {times:.1f} times the last-level cache, and the caches of "
                f"{format_bytes(plan.beyond_bytes)} and more, at least {BEYOND_FACTOR} times the cache, "
                f"are read from main memory.")
    where = ("only " + f"{times:.1f} times the last-level cache" if plan.status == "short"
             else "no larger than the last-level cache")
    return (f"{span}. The largest is {where}: a fair measurement of main memory would need caches of "
            f"{format_bytes(plan.beyond_bytes)} and more, and this build holds at most "
            f"{format_bytes(plan.budget_bytes)} at once ({plan.budget_reason}).")


# ---------------------------------------------------------------- what the measurements say


@dataclass(frozen=True)
class Findings:
    """The figures and sentences chapter 4 states about its measurements (``summarize``)."""

    status: str                     # the plan's: "beyond", "short" or "inside"
    step_bandwidth: float           # bytes/s: median over the caches read from memory (see text)
    copy_bandwidth: float
    ratio: float                    # step_bandwidth / copy_bandwidth
    inside_bandwidth: float | None  # median over the caches of at most plan.inside_bytes
    largest_bytes: int
    largest_seconds: float
    growth: float | None            # time ratio of the two sizes compared, None with one size
    growth_bytes: float | None      # their byte ratio
    growth_from: int | None
    growth_to: int | None
    measured: str                   # what was measured, in a sentence
    result: str                     # the bandwidth found, in a sentence
    inside_sentence: str            # what the caches inside the last-level cache gave
    growth_sentence: str


def _gbs(x: float) -> str:
    return f"{x / 1e9:.1f} GB/s"


def _result_sentence(plan: MeasurementPlan, step_bw: float, copy_bw: float, ratio: float, llc_words: str,
                     largest_bytes: int, last: str) -> str:
    """The sentence of the result: the step's median bandwidth against the copy's, and, when the
    caches could not exceed the last-level cache enough ("short", "inside"), why the figures may
    overstate main memory's bandwidth."""
    llc, status = format_bytes(plan.llc_bytes), plan.status
    relation = "less than" if ratio < 1 else "at least"
    if status == "beyond":
        times_llc = (f"{BEYOND_FACTOR} times the {llc} last-level cache" if plan.llc_known
                     else f"{BEYOND_FACTOR} times {llc_words}")
        return (f"over caches of {format_bytes(plan.beyond_bytes)} and more, at least {times_llc}, the step "
                f"read a median {_gbs(step_bw)}, against {_gbs(copy_bw)} for the copy: a measured "
                f"ratio of {ratio:.2f}, {relation} the copy's bandwidth")
    short = ("is larger than " + llc_words + f" by only {largest_bytes / plan.llc_bytes:.1f} times"
             if status == "short" else "fits inside " + llc_words)
    return (f"this machine's last-level cache cannot be exceeded {BEYOND_FACTOR} times over in the memory "
            f"this build may hold at once, {format_bytes(plan.budget_bytes)} ({plan.budget_reason}): "
            f"the largest cache measured, {last}, {short}, so part of what the step read may have come "
            f"from the cache and these figures can overstate main memory's bandwidth. Over "
            + ("the caches larger than the last-level cache" if status == "short" else "the largest cache")
            + f" the step read a median {_gbs(step_bw)}, against {_gbs(copy_bw)} for the copy: "
            f"a ratio of {ratio:.2f}, {relation} the copy's bandwidth")


def _growth_pair(plan: MeasurementPlan, steps: list[StepMeasurement]):
    """The two largest sizes read from the same place (main memory, partly the cache, or the
    cache alone), or None when there is one size only there."""
    def region(step):
        return 2 if step.cache_bytes >= plan.beyond_bytes else 1 if step.cache_bytes > plan.llc_bytes else 0
    same_side = [s for s in steps if region(s) == region(steps[-1])]
    return same_side[-2:] if len(same_side) >= 2 else None


def _growth(pair) -> tuple[float | None, float | None, str]:
    """(time growth, bytes growth, the sentence comparing them) from the smaller to the larger of
    ``pair``."""
    if not pair:
        return None, None, "only one cache size was measured there, so there is no growth to compare"
    small, big = pair
    growth, growth_bytes = big.seconds / small.seconds, big.cache_bytes / small.cache_bytes
    if growth > 1.25 * growth_bytes:
        verdict = ("more than the bytes: something besides reading them slowed the larger step, most "
                   "likely other programs using the shared machine's memory at the same time")
    elif growth < 0.8 * growth_bytes:
        verdict = "less than the bytes: part of the smaller step's time did not depend on its size"
    else:
        verdict = "about as much as the bytes"
    return growth, growth_bytes, (f"from {format_bytes(small.cache_bytes)} to {format_bytes(big.cache_bytes)}, "
                                  f"{growth_bytes:g} times the bytes, the step's time grew {growth:.1f} times: "
                                  f"{verdict}")


def summarize(plan: MeasurementPlan, steps: list[StepMeasurement], copy: CopyMeasurement) -> Findings:
    """What the measurements of ``plan`` show, in figures and in words (a pure function).

    With status "beyond", the step's bandwidth is the median over the caches of at least
    ``plan.beyond_bytes``; otherwise over the caches larger than the last-level cache (or the
    largest one alone), and the sentences say that these may still be partly read from the
    cache.  The time growth compares the two largest caches read from the same place (main memory,
    partly the cache, or the cache alone).
    """
    steps = sorted(steps, key=lambda s: s.cache_bytes)
    if not steps:
        raise ValueError("no decode step was measured")
    llc, status = format_bytes(plan.llc_bytes), plan.status
    llc_words = (f"the last-level cache ({llc})" if plan.llc_known
                 else f"the last-level cache (Linux did not report it; {llc} was assumed)")
    if status == "beyond":
        chosen = [s for s in steps if s.cache_bytes >= plan.beyond_bytes]
    else:
        chosen = [s for s in steps if s.cache_bytes > plan.llc_bytes] or steps[-1:]
    step_bw = statistics.median(s.bandwidth for s in chosen)
    ratio = step_bw / copy.bandwidth
    inside = [s.bandwidth for s in steps if s.cache_bytes <= plan.inside_bytes]
    largest = steps[-1]
    first, last = format_bytes(steps[0].cache_bytes), format_bytes(largest.cache_bytes)
    measured = f"caches from {first} to {last}, {len(steps)} sizes, against {llc_words}"
    result = _result_sentence(plan, step_bw, copy.bandwidth, ratio, llc_words, largest.cache_bytes, last)
    pair = _growth_pair(plan, steps)
    growth, growth_bytes, growth_sentence = _growth(pair)
    if inside:
        inside_sentence = (f"Caches of {format_bytes(plan.inside_bytes)} or less, which stay in the CPU's caches "
                           f"between repeats, were read at a median {_gbs(statistics.median(inside))}.")
    else:
        inside_sentence = (f"No cache measured was as small as a quarter of the last-level cache "
                           f"({format_bytes(plan.inside_bytes)}), so none shows the speed of the CPU's caches.")
    return Findings(status=status, step_bandwidth=step_bw, copy_bandwidth=copy.bandwidth, ratio=ratio,
                    inside_bandwidth=statistics.median(inside) if inside else None,
                    largest_bytes=largest.cache_bytes, largest_seconds=largest.seconds,
                    growth=growth, growth_bytes=growth_bytes,
                    growth_from=pair[0].cache_bytes if pair else None, growth_to=pair[1].cache_bytes if pair else None,
                    measured=measured, result=result, inside_sentence=inside_sentence,
                    growth_sentence=growth_sentence)
