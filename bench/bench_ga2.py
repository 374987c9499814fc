"""Benchmark of the GA-2 simulator and the checks built on it: ``python -m bench ga2``.

Measures, in one run, with ``time.perf_counter`` wall time:

0. ``import ga2`` in a fresh interpreter, after numpy: the CPU time it adds (the median of
   alternating runs of ``import numpy`` and ``import numpy; import ga2``); every exercise
   sandbox that runs the machine pays it;
1. simulator throughput: every program of the decode loops that ``check_pipeline`` runs
   (both variants, every step), executed from its starting EXT; instructions and simulated
   cycles per second, for ``ga2.machine.Machine`` (numpy) and ``bench.naive_ga2.NaiveMachine``
   (a per-word Python interpreter); then ``Machine.run`` on the programs of one 32-token decode
   loop (both variants, 64 programs), CPU time per instruction with the table of decoded
   instructions emptied before each round (every instruction checked and decoded: what a fresh
   process pays) and with it full (what the steps after the first pay), and ``decode`` alone;
2. ``attn.check_pipeline(exact=True, stagewise=True)``: best of 3 (goal: under 3 s);
3. the whole mutation table (23 mutants + 2 equivalent changes, 2 worker processes, or 1 on a
   one-core machine; goal:
   under 60 s), with the numpy machine and then with the naive one.  Both use the same
   checks and the same early exit (a mutant's run stops once every check has caught it), so
   the ratio between them is the simulator's alone.  For scale, the published GA-2 chapter's way
   of building the table (three separate full runs per mutant, one per check, no early exit) is
   EXTRAPOLATED for both machines from measured runs of each check alone on the correct
   builder: 25 x (t_b + t_c + t_d) / workers.  The naive table is run
   in full when ``GA2_BENCH_NAIVE_TABLE`` is not ``0``; otherwise its time is extrapolated from
   the naive ``check_pipeline`` time and clearly labelled so.

The machine may be shared: wall times vary with the load (printed at the start and the end), and
the processor and its usable cores are printed first (``lessons.machine_facts``), not assumed.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from ga2 import attn, checks, limits, machine as machine_module, mutants
from ga2.machine import Machine, decode
from lessons.machine_facts import describe_machine, read_machine

from .naive_ga2 import NaiveMachine


GOAL_WORKERS = 2      # the mutation table's goal (under 60 s) is for two worker processes


def workers_for(usable_cpus: int | None) -> int:
    """Worker processes for the mutation table: the goal's two, or one where only one core can be
    used (a second process would only share it)."""
    return max(1, min(GOAL_WORKERS, usable_cpus or 1))


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def _workload():
    """(program, EXT before it) of every program check_pipeline runs, and their simulated cycles."""
    pairs = []
    for L in checks.DEFAULT_LS:
        for seed in checks.DEFAULT_SEEDS:
            for step in attn.sequence(attn.make_example(L, 100 * L + seed)):
                pairs += [(run.program, run.ext_before, run.counters) for run in (step.cached, step.recompute)]
    return pairs


def _import_cost(rounds: int = 9) -> tuple[float, float]:
    """Median CPU seconds of a fresh interpreter importing numpy, and what ``import ga2`` adds."""
    # Bytecode written and read as a sandbox's copy has it (compiled in advance): a first, unmeasured
    # run writes it even where PYTHONDONTWRITEBYTECODE is set, else every run would compile ga2.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["OPENBLAS_NUM_THREADS"] = "1"
    code = ("import time, sys; t = time.process_time(); import numpy; n = time.process_time(); import ga2; "
            "print(n - t, time.process_time() - n)")
    numpy_s, ga2_s = [], []
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    for _ in range(rounds):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        a, b = map(float, out.stdout.split())
        numpy_s.append(a)
        ga2_s.append(b)
    return statistics.median(numpy_s), statistics.median(ga2_s)


def decode_loop_programs(L: int = 32, seed: int = 3):
    """(program, EXT before it) of every step of one decode loop of L tokens, both variants."""
    return [(run.program, run.ext_before) for step in attn.sequence(attn.make_example(L, seed))
            for run in (step.cached, step.recompute)]


def _empty_tables() -> None:
    """Forget every decoded and checked instruction: the state of a fresh process."""
    machine_module._decoded.clear()
    limits._valid.cache_clear()


def _run_cpu(pairs, cold: bool, repeats: int) -> float:
    """Best CPU seconds over ``repeats`` of running every program (the tables emptied first if cold)."""
    best = float("inf")
    for _ in range(repeats):
        if cold:
            _empty_tables()
        start = time.process_time()
        for program, ext in pairs:
            Machine(ext).run(program)
        best = min(best, time.process_time() - start)
    return best


def _decode_cpu(pairs, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for program, _ in pairs:
            decode(program)
        best = min(best, time.process_time() - start)
    return best


def _throughput(machine, pairs, repeats: int):
    """Best wall time over ``repeats`` of running every program; instructions/s and cycles/s."""
    instructions = sum(c.instructions for _, _, c in pairs)
    cycles = sum(c.total for _, _, c in pairs)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for program, ext, _ in pairs:
            machine(ext).run(program)
        best = min(best, time.perf_counter() - start)
    return best, instructions / best, cycles / best, instructions, cycles


def _naive_builder():
    """ga2.attn with its decode loops run on the naive interpreter (the checks are unchanged)."""

    class Builder:
        make_example = staticmethod(attn.make_example)
        rq_params = staticmethod(attn.rq_params)
        int_reference = staticmethod(attn.int_reference)

        @staticmethod
        def sequence(example, machine=NaiveMachine):
            return attn.sequence(example, machine=machine)

    return Builder


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    facts = read_machine()
    workers = workers_for(facts.usable_cpus)
    print(f"machine: {describe_machine(facts)}; {workers} worker process(es) for the mutation table")
    print(f"load average at start: {_load()} (wall times grow with the load)")
    numpy_s, ga2_s = _import_cost()
    print(f"\n== 0. import ga2 in a fresh interpreter: {1000 * ga2_s:.1f} ms of CPU after numpy's {1000 * numpy_s:.0f} ms "
          "(medians of 9)")
    pairs = _workload()
    print(f"\n== 1. simulator throughput: the {len(pairs)} programs of check_pipeline's decode loops")
    fast = _throughput(Machine, pairs, repeats=3)
    naive = _throughput(NaiveMachine, pairs, repeats=1)
    for name, (seconds, ips, cps, n, cycles) in (("numpy Machine", fast), ("naive per-word", naive)):
        print(f"  {name:15s} {n:,} instructions, {cycles:,} simulated cycles in {seconds:6.3f} s: "
              f"{ips:10,.0f} instructions/s {cps:14,.0f} simulated cycles/s")
    print(f"  numpy machine / naive interpreter: {naive[0] / fast[0]:.1f}x faster")
    loop = decode_loop_programs()
    n = sum(len(program) for program, _ in loop)
    cold, warm, decoding = _run_cpu(loop, True, 5), _run_cpu(loop, False, 5), _decode_cpu(loop, 5)
    print(f"  Machine.run on a 32-token decode loop ({len(loop)} programs, {n} instructions), CPU, best of 5:")
    print(f"    decoded table emptied first {1000 * cold:6.1f} ms ({1e6 * cold / n:5.2f} us per instruction)")
    print(f"    decoded table full          {1000 * warm:6.1f} ms ({1e6 * warm / n:5.2f} us per instruction); "
          f"decode alone {1000 * decoding:5.1f} ms ({1e6 * decoding / n:4.2f} us)")

    print("\n== 2. attn.check_pipeline(exact=True, stagewise=True): 24 decode loops, 228 steps, both programs")
    worst, problems = attn.check_pipeline(exact=True, stagewise=True)
    assert not problems, problems[:3]
    pipeline = _best_of(lambda: attn.check_pipeline(exact=True, stagewise=True), repeats=3)
    naive_pipeline = _best_of(lambda: checks.check_pipeline(_naive_builder(), exact=True, stagewise=True),
                              repeats=1)
    print(f"  numpy machine:     {pipeline:6.2f} s (best of 3; goal under 3 s)   worst error {worst:.4f}")
    print(f"  naive interpreter: {naive_pipeline:6.2f} s ({naive_pipeline / pipeline:.1f}x)")

    print("\n== 3. the whole mutation table: 25 builders, each decoded once and judged by (b), (c), (d); "
          f"{workers} worker process(es)")
    start = time.perf_counter()
    results = mutants.mutation_table(workers=workers)
    table = time.perf_counter() - start
    s = mutants.summary(results)
    print(f"  numpy machine:     {table:6.1f} s (goal under 60 s)   caught (b) {s['b']}, (c) {s['c']}, (d) {s['d']}, "
          f"any {s['any']} of {s['mutants']}; equivalent caught {s['equivalent_caught']} of {s['equivalent']}")
    if os.environ.get("GA2_BENCH_NAIVE_TABLE", "1") != "0":
        start = time.perf_counter()
        naive_results = mutants.mutation_table(workers=workers, machine=NaiveMachine)
        naive_table = time.perf_counter() - start
        same = [(r.label, r.caught) for r in naive_results] == [(r.label, r.caught) for r in results]
        print(f"  naive interpreter: {naive_table:6.1f} s, measured in full ({naive_table / table:.1f}x slower; "
              f"same verdicts: {same})")
    else:
        estimate = table * naive_pipeline / pipeline
        print(f"  naive interpreter: ~{estimate:6.1f} s EXTRAPOLATED (table time x the check_pipeline ratio "
              f"{naive_pipeline / pipeline:.1f}; not run: GA2_BENCH_NAIVE_TABLE=0)")

    print("\n== 4. for scale: the published chapter's way, three separate full runs per mutant (one per check), no early exit")
    naive_builder = _naive_builder()
    for name, builder in (("numpy machine", attn), ("naive interpreter", naive_builder)):
        single = [_best_of(lambda kw=kw: checks.check_pipeline(builder, **kw), repeats=1)
                  for kw in ({"bound": mutants.BOUND}, {"exact": True}, {"stagewise": True})]
        estimate = len(results) * sum(single) / workers
        print(f"  {name:17s}  (b) {single[0]:5.2f} s  (c) {single[1]:5.2f} s  (d) {single[2]:5.2f} s per run:  "
              f"table ~{estimate:6.1f} s EXTRAPOLATED ({estimate / table:.1f}x the measured table above)")
    print(f"\nload average at end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
