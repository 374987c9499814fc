"""Benchmark of GA-2's circuit in its two simulators: ``python -m bench rtl``.

Measures, in one run, with ``time.perf_counter`` wall time, for Icarus Verilog and Verilator:

1. the build (``iverilog`` / ``verilator --binary``: design and testbench, from scratch);
2. the ten attention programs of ``python -m ga2.rtl`` (53,292 cycles), one invocation;
3. the fuzz test's random programs (``ga2.rtl.fuzz``, the test's seed and count), one invocation;

each checked against ``ga2.machine`` (a difference fails the benchmark) and given as simulated
cycles per second, beside the model (``Machine``) on the same programs.  Run times include
writing the hex files, the testbench's loading and dumping of EXT and SPAD, and reading them
back.  The machine is shared: times vary with the load.
"""
from __future__ import annotations

import time

from ga2.cycles import cycle_counts
from ga2.rtl import compare, fuzz, programs, simulators

from .bench_ga2 import _load

FUZZ_PROGRAMS, FUZZ_SEED = 300, 2024      # as tests/ga2/test_rtl_fuzz.py


def measure(name: str, workloads: dict) -> list[str]:
    """Build simulator ``name`` once and run each workload; the lines to print."""
    with simulators.make_simulator(name) as sim:
        start = time.perf_counter()
        sim.build()
        lines = [f"  {sim.name:10s} build {time.perf_counter() - start:6.2f} s   ({sim.build_command_text()[:60]} ...)"]
        for label, cases in workloads.items():
            verdict = compare.check(cases, sim)
            if not verdict.passed:
                raise AssertionError(verdict.line())
            rate = verdict.total_cycles / verdict.run_seconds
            lines.append(f"  {sim.name:10s} {label:28s} {verdict.run_seconds:6.2f} s  {verdict.total_cycles:9,} cycles "
                         f"{rate:11,.0f} cycles/s  (PASS)")
    return lines


def _model_rate(cases) -> tuple[float, int]:
    cycles = sum(cycle_counts(case.program).total for case in cases)
    start = time.perf_counter()
    for case in cases:
        compare.model_run(case)
    return time.perf_counter() - start, cycles


def main(fuzz_programs: int = FUZZ_PROGRAMS) -> int:
    print(f"load average at start: {_load()} (2 cores shared; wall times grow with the load)")
    workloads = {"the ten attention programs": programs.attention_programs(),
                 f"{fuzz_programs} random programs": fuzz.random_cases(fuzz_programs, FUZZ_SEED)}
    missing = [cls.name for cls in simulators.SIMULATORS.values() if not cls.is_available()]
    if missing:
        raise RuntimeError(f"not installed: {', '.join(missing)} (make system-deps)")
    for name in simulators.SIMULATORS:
        for line in measure(name, workloads):
            print(line, flush=True)
    for label, cases in workloads.items():
        seconds, cycles = _model_rate(cases)
        print(f"  {'model':10s} {label:28s} {seconds:6.2f} s  {cycles:9,} cycles {cycles / seconds:11,.0f} cycles/s "
              f"(ga2.machine, numpy)")
    print(f"load average at end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
