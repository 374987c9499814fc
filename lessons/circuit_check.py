"""GA-2's attention programs on the circuit and on the model (chapter 10): run them on the Verilog
circuit when Icarus Verilog is installed, compare the circuit's counters and memories with the
model's (``ga2.machine``), and say in a sentence what was found.

A machine without Icarus still builds the chapter: the comparison then holds the model's runs
only, its table shows the model's counters, and its sentence says how to run the circuit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from coursebook import table

try:
    from ga2 import rtl
except ImportError:     # the learner's copy leaves the circuit out: its chapter then reads this section
    rtl = None

#: The circuit's five counters, as the table names them.
COUNTERS = ["total", "matrix", "DMA", "vector", "instructions"]
_COMMAS = {"total": ",", "matrix": ",", "DMA": ",", "vector": ","}


@dataclass
class CircuitComparison:
    """The programs, the model's run of each, and the circuit's (``runs`` None when no simulator
    ran them), with how long the circuit took, building included."""

    programs: list
    models: list
    runs: list | None = None
    seconds: float | None = None

    @property
    def agreeing(self) -> int | None:
        """How many programs left the same counters and memories on the circuit as on the model."""
        if self.runs is None:
            return None
        return sum(rtl.first_difference(run, model) is None for run, model in zip(self.runs, self.models))

    @property
    def model_cycles(self) -> int:
        return sum(m.counters.total for m in self.models)

    def table(self):
        """The circuit's five counters and whether each program agrees with the model; without a
        circuit run, the model's counters."""
        if self.runs is None:
            return table([(case.label, *m.counters) for case, m in zip(self.programs, self.models)],
                         ["program", *COUNTERS], _COMMAS, caption="the model's counters")
        return table([(case.label, *run.counters, "yes" if rtl.first_difference(run, model) is None else "NO")
                      for case, run, model in zip(self.programs, self.runs, self.models)],
                     ["program", *COUNTERS, "same as the model"], _COMMAS, caption="the circuit's five counters")

    def sentence(self) -> str:
        circuit_cycles = None if self.runs is None else sum(run.total for run in self.runs)
        return circuit_sentence(len(self.programs), self.model_cycles, circuit_cycles, self.seconds, self.agreeing)


def compare_on_the_circuit(programs, simulator: str = "icarus") -> CircuitComparison:
    """Run ``programs`` on the model, and on the circuit when ``simulator`` is installed."""
    if rtl is None:
        raise ImportError("ga2.rtl, GA-2's circuit, is not in this copy of the course: the full course has it")
    models = [rtl.model_run(case) for case in programs]
    if simulator not in rtl.available():
        return CircuitComparison(list(programs), models)
    start = time.perf_counter()
    runs = rtl.run(programs, sim=simulator)
    return CircuitComparison(list(programs), models, runs, time.perf_counter() - start)


def circuit_sentence(programs: int, model_cycles: int, circuit_cycles: int | None = None,
                     seconds: float | None = None, agreeing: int | None = None) -> str:
    """What the comparison found: the circuit's time and cycles, and for how many programs its
    counters equal the model's; or, with no circuit run (``circuit_cycles`` None), why, and the
    model's cycles."""
    if circuit_cycles is None:
        return (f"No Icarus Verilog was installed on the machine that built this page, so the circuit did not "
                f"run here: the table shows the model's counters, {model_cycles:,} cycles in total for the "
                f"{programs} programs. With Icarus installed (`make system-deps` installs it, and `make book` "
                f"runs that step first), this section runs the programs on the circuit and compares its counters "
                f"and memories with the model's; `python -m ga2.rtl` does the same from a terminal.")
    if seconds is None or agreeing is None:
        raise ValueError("a circuit run needs its seconds and how many programs agreed")
    verdict = "every one" if agreeing == programs else f"only {agreeing} of {programs}"
    return (f"The circuit ran the {programs} programs in {seconds:.1f} s (building included, on the "
            f"machine that built this page), {circuit_cycles:,} cycles in total. For {verdict} of them its five "
            f"counters equal the model's, and so does every word of EXT and SPAD it leaves: the model's "
            f"cycle counts are the circuit's.")
