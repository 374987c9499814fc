"""bench_kernel: the attention kernel of ``kvcache.kernel`` (chapter 8), timed: ``python -m bench kernel``.

Measured in one run, every time the fastest of several samples taken in turn
(``lessons.kernel_timing.interleaved_best``), float32, head size 128, one query:

1. the early exit against masking the whole buffer: ``blocked_decode`` (reads ceil(t / B)
   blocks) and ``full_buffer_decode`` (the same loop over every block of the buffer, those past t
   masked whole), over one buffer of 32,768 rows in blocks of 256, for t / max_seq_len = 1/64,
   1/32, ..., 1.  The early exit's time should follow t; the whole-buffer loop's should not move;
2. blockwise against one-shot attention at full length (65,536 rows): ``blocked_decode`` for
   blocks of 64 to 16,384 rows against ``one_shot_decode`` (softmax(K q / sqrt(d)) V in three
   numpy calls);
3. split-K against one pass, one query over 65,536 positions, blocks of 2,048, and over the
   context the chapter's plan (``plan_split_k``) chooses beyond the last-level cache, read from
   main memory (1 GiB of K and V on a machine with a 480 MiB cache): the chunks walked by a pool
   of 2 threads (one pool made once and reused), and the same chunks one after the other.  The threads run at once because numpy releases Python's global lock inside its
   matrix products and exponentials; each thread's products run on one BLAS thread.  For
   comparison, one pass whose products use the BLAS library's own threads instead (the other
   way to put two cores on one query).

Parts 1 to 3 run in a child process whose BLAS library is limited to one thread before numpy is
loaded (``kvcache.blas.limit_blas_threads``), so that split-K's threads are the only
parallelism; the BLAS-threaded one pass runs in a second child with the library's default.  The
machine may be shared: its load is printed at the start and the end, and its processor and
usable cores first (``lessons.machine_facts``), not assumed.
"""
from __future__ import annotations

import os
import subprocess
import sys

BUFFER = 32_768          # part 1
LONG = 65_536            # parts 2 and 3
HEAD_DIM = 128
SPLIT_BLOCK = 2_048
THREADS = 2


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def _buffers(rows: int, rng_key: int = 0):
    """q, K, V in float32 (K and V one block of random numbers repeated: see lessons.bandwidth)."""
    import numpy as np

    from lessons.bandwidth import repeated_random
    rng = np.random.default_rng(rng_key)
    q = rng.standard_normal(HEAD_DIM, dtype=np.float32)
    return q, repeated_random(rows, HEAD_DIM, np.float32, rng), repeated_random(rows, HEAD_DIM, np.float32, rng)


def early_exit() -> None:
    from kvcache.kernel import blocked_decode, full_buffer_decode
    from lessons.kernel_timing import interleaved_best
    q, K, V = _buffers(BUFFER)
    block = 256
    print(f"1. early exit against masking the whole buffer: {BUFFER:,} rows, blocks of {block}, d = {HEAD_DIM}")
    print(f"   {'t / N':>6} {'t':>7} {'blocks':>7} {'early exit ms':>14} {'whole buffer ms':>16} "
          f"{'ratio':>7} {'exit time / t, relative to t = N':>33}")
    rows = []
    for k in range(6, -1, -1):
        t = BUFFER >> k
        best = interleaved_best({"exit": lambda: blocked_decode(q, K, V, t, block),
                                 "full": lambda: full_buffer_decode(q, K, V, t, block)}, repeats=7)
        rows.append((k, t, best["exit"], best["full"]))
    per_row_full = rows[-1][2] / rows[-1][1]
    for k, t, exit_s, full_s in rows:
        print(f"   {'1/' + str(1 << k) if k else '1':>6} {t:>7,} {-(-t // block):>7} {exit_s * 1e3:>14.3f} "
              f"{full_s * 1e3:>16.3f} {full_s / exit_s:>7.1f} {exit_s / t / per_row_full:>33.2f}")
    spread = max(r[3] for r in rows) / min(r[3] for r in rows)
    print(f"   whole-buffer loop: slowest / fastest over the lengths = {spread:.2f} (1 would be flat); "
          f"early exit at 1/64 vs 1: {rows[-1][2] / rows[0][2]:.1f} times the time for 64 times the rows")


def blockwise_vs_one_shot() -> None:
    from kvcache.kernel import blocked_decode, one_shot_decode
    from lessons.kernel_timing import interleaved_best
    q, K, V = _buffers(LONG)
    print(f"\n2. blockwise against one-shot attention at full length: {LONG:,} rows, d = {HEAD_DIM}")
    fns = {"one shot": lambda: one_shot_decode(q, K, V)}
    for block in (64, 256, 1024, 4096, 16384):
        fns[block] = (lambda b: lambda: blocked_decode(q, K, V, LONG, b))(block)
    best = interleaved_best(fns, repeats=7)
    print(f"   one-shot: {best['one shot'] * 1e3:.3f} ms")
    for block in (64, 256, 1024, 4096, 16384):
        print(f"   blocks of {block:>6,}: {best[block] * 1e3:8.3f} ms  ({LONG // block:>5,} blocks)  "
              f"blockwise / one-shot = {best[block] / best['one shot']:.2f}")


def split_k() -> None:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from kvcache.kernel import blocked_decode, split_k_decode
    from lessons.kernel_timing import interleaved_best, plan_split_k
    from lessons.machine_facts import read_machine
    from lessons.memory import format_bytes
    facts = read_machine()
    cores = facts.usable_cpus
    contexts = [(LONG, SPLIT_BLOCK)]
    memory = plan_split_k(facts).context("memory")       # the chapter's context beyond the cache
    if memory is not None:
        contexts.append((memory.positions, memory.block))
    print(f"\n3. split-K against one pass: 1 query, {THREADS} threads on {cores} usable cores "
          f"(BLAS: one thread per product); last-level cache {format_bytes(facts.llc_bytes or 0)}")
    if cores is not None and cores < THREADS:
        print(f"   only {cores} usable core(s): the threads share it, and split-K can only cost here")
    with ThreadPoolExecutor(THREADS) as pool:
        for positions, block in contexts:
            q, K, V = _buffers(positions)
            print(f"   {positions:,} positions (K and V {format_bytes(2 * K.nbytes)}), blocks of {block:,}:")
            fns = {"one pass": lambda: blocked_decode(q, K, V, positions, block)}
            for splits in (2, 4, 8):
                fns[f"{splits} chunks, {THREADS} threads"] = (
                    lambda s: lambda: split_k_decode(q, K, V, positions, block, s, pool=pool))(splits)
            fns["2 chunks, one after the other"] = lambda: split_k_decode(q, K, V, positions, block, 2)
            best = interleaved_best(fns, repeats=9)
            gap = float(np.max(np.abs(split_k_decode(q, K, V, positions, block, 2, pool=pool)[0]
                                      - blocked_decode(q, K, V, positions, block)[0])))
            one = best["one pass"]
            for name, seconds in best.items():
                print(f"     {name:<32} {seconds * 1e3:8.3f} ms   one pass / this = {one / seconds:.2f}")
            print(f"     largest difference between split-K and one pass: {gap:.1e} (float32)")
            del q, K, V


def blas_threaded_one_pass() -> None:
    from kvcache.kernel import blocked_decode
    from lessons.kernel_timing import interleaved_best
    from kvcache.blas import blas_threads
    q, K, V = _buffers(LONG)
    best = interleaved_best({"one": lambda: blocked_decode(q, K, V, LONG, SPLIT_BLOCK)}, repeats=9)
    print(f"   one pass, BLAS with its own threads ({blas_threads() or 'unknown'}): "
          f"{best['one'] * 1e3:8.3f} ms")


def _child(part: str) -> None:
    if part == "one-thread":
        from kvcache.blas import limit_blas_threads
        limit_blas_threads(1)
        early_exit()
        blockwise_vs_one_shot()
        split_k()
    else:
        blas_threaded_one_pass()


def main() -> int:
    from lessons.machine_facts import describe_machine, read_machine
    print(describe_machine(read_machine()), f"; load {_load()}")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    for part in ("one-thread", "blas-threads"):
        sys.stdout.flush()
        done = subprocess.run([sys.executable, "-m", "bench.bench_kernel", part], env=env,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if done.returncode != 0:
            raise RuntimeError(f"the {part} measurement failed (exit status {done.returncode})")
    print(f"load at the end: {_load()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("one-thread", "blas-threads"):
        _child(sys.argv[1])
    else:
        sys.exit(main())
