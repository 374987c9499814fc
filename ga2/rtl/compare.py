"""The circuit against the model: every word of EXT and SPAD and all five counters.

``first_difference`` compares one program's ``CircuitRun`` with ``ga2.machine.Machine`` run on
the same program and memories; ``check`` runs a batch in one simulator and returns a
``Verdict`` whose ``line()`` is what ``python -m ga2.rtl`` prints.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..cycles import CycleCounts
from ..machine import Machine
from . import circuit, simulators, sources

__all__ = ["Difference", "Verdict", "model_run", "first_difference", "check"]


class Difference(NamedTuple):
    """Where a program's run on the circuit first differs from the model's, and both values."""

    label: str
    where: str          # "status", "counter total", "EXT[3072]", "SPAD[2880]", ...
    circuit: object
    model: object

    def __str__(self) -> str:
        word = lambda v: f"{int(v) & 0xFFFFFFFF:#010x} ({int(v)})" if isinstance(v, (int, np.integer)) else str(v)
        show = word if "[" in self.where else str
        return f"program {self.label}: {self.where}: circuit {show(self.circuit)}, model {show(self.model)}"


def model_run(case: circuit.Case) -> Machine:
    """The model's machine after running the case (the circuit's memory sizes)."""
    return Machine(case.ext, case.spad, ext_words=sources.EXT_WORDS, spad_words=sources.SPAD_WORDS).run(case.program)


def first_difference(run: circuit.CircuitRun, machine: Machine) -> Difference | None:
    """The first difference between the circuit's run and the model's machine, or None."""
    if run.status != "HALT":
        return Difference(run.label, "status", run.status, "HALT")
    if run.undefined:
        memory, address = run.undefined[0]
        want = (machine.ext if memory == "EXT" else machine.spad)[address]
        return Difference(run.label, f"{memory}[{address}]", "undefined (x)", int(want))
    for name, got, want in zip(CycleCounts._fields, run.counters, machine.counters):
        if got != want:
            return Difference(run.label, f"counter {name}", got, want)
    for memory, got, want in (("EXT", run.ext, machine.ext), ("SPAD", run.spad, machine.spad)):
        if got.shape != want.shape:
            return Difference(run.label, f"{memory} size", got.size, want.size)
        differ = np.flatnonzero(got != want)
        if differ.size:
            address = int(differ[0])
            return Difference(run.label, f"{memory}[{address}]", int(got[address]), int(want[address]))
    return None


@dataclass
class Verdict:
    """One simulator's result on a batch of programs."""

    simulator: str
    programs: int
    total_cycles: int = 0
    difference: Difference | None = None
    unavailable: str | None = None
    build_seconds: float | None = None
    run_seconds: float | None = None

    @property
    def passed(self) -> bool:
        return self.unavailable is None and self.difference is None

    def line(self) -> str:
        name = f"{self.simulator:10s}"
        if self.unavailable is not None:
            return f"{name} UNAVAILABLE: {self.unavailable}"
        timing = (f" (build {self.build_seconds:.2f} s, run {self.run_seconds:.2f} s)"
                  if self.build_seconds is not None and self.run_seconds is not None else "")
        if self.difference is not None:
            return f"{name} FAIL: {self.difference}; {self.total_cycles} cycles in total{timing}"
        return (f"{name} PASS: {self.programs} programs match the Python reference (memory and all five cycle "
                f"counters), {self.total_cycles} cycles in total{timing}")


def check(cases, sim, host_port: bool = False) -> Verdict:
    """Run ``cases`` in simulator ``sim`` (a name or a ``Simulator``) and compare each with the
    model; the first difference is reported."""
    cases = [circuit.as_case(item, k) for k, item in enumerate(cases)]
    machines = [model_run(case) for case in cases]       # also refuses an invalid program first
    owned = isinstance(sim, str)
    simulator = simulators.make_simulator(sim) if owned else sim
    verdict = Verdict(simulator.name, len(cases))
    try:
        start = time.perf_counter()
        simulator.build()
        verdict.build_seconds = time.perf_counter() - start
        start = time.perf_counter()
        runs = circuit.run(cases, sim=simulator, host_port=host_port)
        verdict.run_seconds = time.perf_counter() - start
    except simulators.SimulatorUnavailable as err:
        verdict.unavailable = str(err)
        return verdict
    finally:
        if owned:
            simulator.close()
    verdict.total_cycles = sum(run.total for run in runs)
    for run, machine in zip(runs, machines):
        verdict.difference = first_difference(run, machine)
        if verdict.difference is not None:
            break
    return verdict
