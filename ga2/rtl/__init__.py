"""GA-2 as a circuit: synthesizable Verilog that runs GA-2 programs cycle for cycle.

The Verilog (``ga2/rtl/*.v``, one module per unit, ``sources.DESIGN``) implements
``ga2/SPEC.md``: the same results as ``ga2.machine`` and, instruction by instruction, 2 issue
cycles plus the wait of the spec's cycle table, counted by the circuit's five counters.
The testbench (``tb/ga2_tb.sv``) loads a program and the memory images as hex, runs to HALT
and dumps the memories and the counters; Icarus Verilog and Verilator run it.

    run(programs, sim="icarus")     run programs on the circuit: a CircuitRun per program
                                    (status, counters, EXT, SPAD)
    check(programs, sim)            run them and compare with ga2.machine: a Verdict
    attention_programs()            the ten attention programs (cached, recompute; L = 2 .. 32)
    python -m ga2.rtl               both simulators on the ten programs: PASS or the first difference

Modules: ``sources`` (the files), ``simulators`` (building and running), ``images`` (the hex
files), ``circuit`` (``run``), ``compare`` (``check``), ``programs``, ``static_checks``
(Verilator lint, Yosys synthesis), ``exp_rom`` (writes the softmax unit's table).
"""
from __future__ import annotations

from .circuit import Case, CircuitLimitError, CircuitRun, run
from .compare import Difference, Verdict, check, first_difference, model_run
from .programs import attention_programs
from .simulators import SIMULATORS, SimulationError, SimulatorUnavailable, available, make_simulator

__all__ = [
    "run", "Case", "CircuitRun", "CircuitLimitError",
    "check", "Verdict", "Difference", "first_difference", "model_run",
    "attention_programs",
    "SIMULATORS", "available", "make_simulator", "SimulatorUnavailable", "SimulationError",
]
