"""``python -m ga2.rtl``: the ten attention programs on the circuit, against the model.

    python -m ga2.rtl [--sim icarus|verilator|both] [--host-port] [--lint] [--synth] [--sizes]
                      [--rtl-dir DIR]

Prints one line per simulator, PASS (and the cycles of the ten programs in total) or the first
difference (the program, the address or counter, both values), with the time it took to build
and to run.  Exits 0 only when every simulator asked for matched on everything; 1 on a
difference; 2 when a simulator (or the tool of --lint, --synth) is not installed.
"""
from __future__ import annotations

import argparse
import sys

from . import compare, programs, simulators, sources, static_checks


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ga2.rtl", description="Run the ten attention programs on "
                                     "GA-2's circuit and compare every word and counter with the model.")
    parser.add_argument("--sim", choices=("icarus", "verilator", "both"), default="both",
                        help="which simulator runs the circuit (default: both)")
    parser.add_argument("--host-port", action="store_true",
                        help="load and dump the memories through the circuit's host port (slower)")
    parser.add_argument("--lint", action="store_true", help="also lint the design: verilator --lint-only -Wall")
    parser.add_argument("--synth", action="store_true", help="also synthesize the design with Yosys (if installed)")
    parser.add_argument("--sizes", action="store_true", help="also print the Verilog's lines per module")
    parser.add_argument("--rtl-dir", metavar="DIR",
                        help="simulate the Verilog in DIR (a copy of ga2/rtl, changed to try something) "
                             "instead of ga2/rtl")
    return parser


def _static_check(label: str, check, describe) -> int:
    """Run ``check()``, print its line; the exit status it calls for (0 clean, 1 not, 2 no tool)."""
    try:
        print(f"{label:10s} {describe(check())}")
        return 0
    except simulators.SimulatorUnavailable as err:
        print(f"{label:10s} UNAVAILABLE: {err}")
        return 2
    except simulators.SimulationError as err:
        print(f"{label:10s} FAIL: {err}")
        return 1


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    names = ["icarus", "verilator"] if args.sim == "both" else [args.sim]
    status = 0
    if not any(simulators.SIMULATORS[name].is_available() for name in names):
        wanted = " or ".join(simulators.SIMULATORS[name].debian_package for name in names)
        print(f"no simulator to run the circuit: install {wanted} (make system-deps installs both)")
        return 2
    if args.sizes:
        rows = sources.module_lines()
        for name, lines, what in rows:
            print(f"  {name:16s} {lines:5d} lines  {what}")
        print(f"  {'design':16s} {sum(n for f, n, _ in rows if not f.startswith('tb/')):5d} lines in "
              f"{len(sources.DESIGN)} modules")
    if args.lint:
        status = max(status, _static_check("lint", static_checks.lint,
                                           lambda _: "clean: verilator --lint-only -Wall (the design, every module)"))
    if args.synth:
        status = max(status, _static_check("synthesis", static_checks.synthesize,
                                           lambda stats: "clean (yosys):\n" + stats))
    cases = programs.attention_programs()
    for name in names:
        try:
            simulator = simulators.make_simulator(name, source_dir=args.rtl_dir)
            try:
                verdict = compare.check(cases, simulator, host_port=args.host_port)
            finally:
                simulator.close()
        except simulators.SimulationError as err:
            print(f"{simulators.SIMULATORS[name].name:10s} ERROR: {err}")
            status = max(status, 1)
            continue
        print(verdict.line(), flush=True)
        if verdict.unavailable is not None:
            status = max(status, 2)
        elif not verdict.passed:
            status = max(status, 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
