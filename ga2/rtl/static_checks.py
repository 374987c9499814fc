"""Checks of the Verilog that need no program: Verilator's lint and a Yosys synthesis.

    lint()         verilator --lint-only -Wall on the design (not the testbench); clean or
                   ``SimulationError`` with the warnings
    synthesize()   yosys: read the design, synthesize the top (memories kept as memory cells,
                   as an FPGA or SRAM compiler would take them), map to generic gates; the
                   cell counts, or ``SimulationError`` when Yosys warns (a latch, a
                   combinational loop, a memory it cannot infer...)

Yosys is optional (Debian's yosys; not installed by ``make system-deps``): ``synthesize``
raises ``SimulatorUnavailable`` without it.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import sources
from .simulators import SimulationError, SimulatorUnavailable

__all__ = ["lint_command", "lint", "synthesis_script", "synthesize"]


def lint_command() -> list[str]:
    return ["verilator", "--lint-only", "-Wall", "--top-module", sources.TOP, *map(str, sources.design_paths())]


def lint() -> str:
    """Lint the design with every Verilator warning on; '' when clean."""
    if shutil.which("verilator") is None:
        raise SimulatorUnavailable("verilator is not installed (Debian package verilator; make system-deps)")
    done = subprocess.run(lint_command(), capture_output=True, text=True, timeout=300)
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0 or output:
        raise SimulationError(f"verilator --lint-only -Wall is not clean:\n{output}")
    return output


def synthesis_script() -> str:
    reads = " ".join(str(path) for path in sources.design_paths())
    # synth up to its "fine" step, which would turn the memories into flip-flops; then map
    return (f"read_verilog {reads}; synth -top {sources.TOP} -run begin:fine; opt -fast -full; techmap; "
            f"opt -fast; abc -fast; opt_clean; check -assert; stat")


def synthesize(timeout: float = 600) -> str:
    """Synthesize the design with Yosys; the statistics of the top level (cells by type)."""
    if shutil.which("yosys") is None:
        raise SimulatorUnavailable("yosys is not installed (Debian package yosys: apt-get install yosys)")
    with tempfile.TemporaryDirectory(prefix="ga2-rtl-yosys-") as folder:
        log = Path(folder) / "yosys.log"
        done = subprocess.run(["yosys", "-q", "-l", str(log), "-p", synthesis_script()], cwd=folder,
                              capture_output=True, text=True, timeout=timeout)
        text = log.read_text() if log.exists() else done.stdout + done.stderr
    warnings = [line for line in text.splitlines() if line.startswith("Warning")]
    if done.returncode != 0 or warnings:
        raise SimulationError("yosys did not synthesize the design cleanly:\n" + "\n".join(
            (warnings or text.strip().splitlines())[-20:]))
    summary = text[text.rfind("=== design hierarchy ==="):]
    summary = summary.split("End of script", 1)[0]
    return re.sub(r"\n\s*\n+", "\n", summary).strip()
