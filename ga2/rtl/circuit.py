"""Running GA-2 programs on the circuit: ``run(programs, sim="icarus")``.

Each program is checked first by the model's own validation (``ga2.limits.check_program``,
the same function ``Machine.run`` calls), so a program that breaks a limit raises
``ProgramError`` before any simulator starts; then it is encoded (``ga2.encoding``), written
with its memory images to a run folder, and the whole batch runs in one simulator
invocation.  What comes back per program is a ``CircuitRun``: how it stopped, the five
counters the circuit counted, and EXT and SPAD as the circuit left them.

A program is given as a ``Case`` (label, program, ext, spad), a tuple ``(program, ext)`` or
``(program, ext, spad)``, or a ``ga2.attn.ProgramRun`` (its program and the EXT it started
from).  EXT and SPAD start as in ``ga2.machine.Machine``: the given words, zero-padded.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..attn import ProgramRun
from ..cycles import CycleCounts, cycle_counts
from ..encoding import encode
from ..limits import check_program
from ..machine import to_words
from . import images, simulators, sources

__all__ = ["Case", "CircuitRun", "CircuitLimitError", "as_case", "run"]


class Case(NamedTuple):
    """A program and the memories it starts from (``spad`` None: all zeros)."""

    label: str
    program: list
    ext: object = None
    spad: object = None


@dataclass(frozen=True)
class CircuitRun:
    """What the circuit did with one program.

    ``status`` is "HALT" (the program ran to its end), "FAULT" (the control met an opcode it
    does not know) or "TIMEOUT" (the testbench gave up); ``counters`` are the circuit's five
    counters; ``ext`` and ``spad`` the memories after the run (int32 arrays).  ``undefined``
    lists words the circuit left undefined (x in Icarus) as (memory, address); they read as 0.
    """

    label: str
    simulator: str
    status: str
    counters: CycleCounts
    ext: np.ndarray
    spad: np.ndarray
    undefined: tuple = ()

    @property
    def total(self) -> int:
        return self.counters.total


class CircuitLimitError(ValueError):
    """A valid program the circuit cannot hold (its program memory has IMEM_WORDS words)."""


def as_case(item, index: int = 0) -> Case:
    """``item`` as a ``Case`` (see the module's docstring for the forms accepted)."""
    if isinstance(item, Case):
        return item
    if isinstance(item, ProgramRun):
        return Case(f"program {index}", item.program, item.ext_before)
    if isinstance(item, tuple) and len(item) in (2, 3):
        return Case(f"program {index}", *item)
    raise TypeError(f"program {index}: expected a Case, a ProgramRun or a tuple (program, ext[, spad]), "
                    f"got {type(item).__name__}")


def _prepare(case: Case):
    """(words, ext, spad) of a case: checked, encoded, its memories at the circuit's sizes."""
    checked = check_program(case.program, sources.EXT_WORDS, sources.SPAD_WORDS)
    words = encode(checked)
    room = sources.IMEM_WORDS - 4     # the testbench writes four zero words after the program
    if len(words) > room:
        raise CircuitLimitError(f"{case.label}: {len(words)} words of program, the circuit's program memory "
                                f"holds {room}")
    return words, to_words(case.ext, sources.EXT_WORDS), to_words(case.spad, sources.SPAD_WORDS), checked


def run(programs, sim="icarus", *, host_port: bool = False, build_dir=None) -> list[CircuitRun]:
    """Run ``programs`` on the circuit in one simulator; a ``CircuitRun`` per program, in order.

    ``sim`` is "icarus", "verilator" or a built ``ga2.rtl.simulators.Simulator`` (reused, not
    closed: build one to run many batches).  ``host_port`` loads and dumps the memories
    through the circuit's host port instead of directly (slower; it tests the port).
    ``build_dir`` keeps the build there (reused when its sources are unchanged).
    Raises ``ProgramError`` (an invalid program), ``SimulatorUnavailable`` or ``SimulationError``.
    """
    cases = [as_case(item, k) for k, item in enumerate(programs)]
    prepared = [_prepare(case) for case in cases]          # everything is checked before anything runs
    if not cases:
        return []
    owned = isinstance(sim, str)
    simulator = simulators.make_simulator(sim, build_dir) if owned else sim
    try:
        simulator.build()
        # a guard against a circuit that never halts: far beyond what any program needs
        max_cycles = 4 * max(cycle_counts(checked).total for *_, checked in prepared) + 10_000
        with tempfile.TemporaryDirectory(prefix="ga2-rtl-run-") as folder:
            run_dir = Path(folder)
            for k, (words, ext, spad, _) in enumerate(prepared):
                images.write_case(run_dir, k, words, ext, spad)
            stdout = simulator.execute(run_dir, len(cases), max_cycles, host_port=host_port)
            results = images.parse_results(stdout, len(cases))
            runs = []
            for case, result in zip(cases, results):
                (ext, ext_x), (spad, spad_x) = images.read_case(run_dir, result.index, sources.EXT_WORDS,
                                                                sources.SPAD_WORDS)
                undefined = tuple(("EXT", int(a)) for a in ext_x) + tuple(("SPAD", int(a)) for a in spad_x)
                runs.append(CircuitRun(case.label, simulator.name, result.status, result.counters, ext, spad,
                                       undefined))
            return runs
    finally:
        if owned:
            simulator.close()
