"""Icarus Verilog and Verilator: building the circuit with its testbench and running it.

A ``Simulator`` compiles once (``build``) into a folder of its own, outside the source tree
(a temporary folder unless one is given), then runs any number of batches of programs
(``execute``), each in a run folder that ``ga2.rtl.images`` fills and reads.  ``close``
removes what the simulator made, unless the folder was given to it.

    Icarus      iverilog -g2012 -> a vvp script; vvp runs it (fast to build, slower to run)
    Verilator   verilator --binary --timing -> a C++ executable (slow to build, fast to run)

Both come from Debian (``make system-deps`` installs them: iverilog, verilator).  A missing
one raises ``SimulatorUnavailable``, which names the package.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import sources

__all__ = ["SIMULATORS", "SimulatorUnavailable", "SimulationError", "Simulator", "Icarus", "Verilator",
           "make_simulator", "available"]


class SimulatorUnavailable(RuntimeError):
    """The simulator's program is not installed."""


class SimulationError(RuntimeError):
    """The simulator failed to build or to run the testbench."""


def _run(command: list[str], cwd: Path, what: str, timeout: float) -> str:
    """Run ``command``; its stdout, or ``SimulationError`` with the tail of its output."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise SimulationError(f"{what} did not finish within {timeout:.0f} s: {' '.join(command[:3])} ...") from err
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise SimulationError(f"{what} failed (exit status {done.returncode}):\n{tail}")
    return done.stdout


class Simulator:
    """One simulator: ``build()`` once, then ``execute(run_dir, programs)`` per batch."""

    name = ""
    programs_needed: tuple[str, ...] = ()
    debian_package = ""

    def __init__(self, build_dir: str | os.PathLike | None = None, source_dir: str | os.PathLike | None = None):
        self.source_dir = sources.RTL_DIR if source_dir is None else Path(source_dir).resolve()
        self._own_dir = build_dir is None
        self._build_dir = None if build_dir is None else Path(build_dir)
        self.build_seconds: float | None = None   # wall time of the last build (None: reused or not built)
        self._built = False

    @property
    def build_dir(self) -> Path:
        """Where the build goes: the folder given, or a temporary one made when first needed."""
        if self._build_dir is None:
            self._build_dir = Path(tempfile.mkdtemp(prefix=f"ga2-rtl-{self.name.lower()}-"))
        return self._build_dir

    # ---------------------------------------------------------------- availability
    @classmethod
    def missing(cls) -> list[str]:
        """The programs this simulator needs that are not on PATH."""
        return [program for program in cls.programs_needed if shutil.which(program) is None]

    @classmethod
    def is_available(cls) -> bool:
        return not cls.missing()

    def _require(self) -> None:
        missing = self.missing()
        if missing:
            raise SimulatorUnavailable(
                f"{self.name} is not installed ({', '.join(missing)} not found on PATH): install the Debian "
                f"package {self.debian_package} (make system-deps, or apt-get install {self.debian_package})")

    # ---------------------------------------------------------------- building and running
    def build(self, timeout: float = 900) -> "Simulator":
        """Compile the design and the testbench (once; a build of the same sources is reused)."""
        self._require()
        self.build_dir.mkdir(parents=True, exist_ok=True)
        stamp = self.build_dir / f"{self.name.lower()}.sources"
        digest = sources.source_digest(self.source_dir)
        if self._built or (stamp.exists() and stamp.read_text() == digest and self._output().exists()):
            self._built = True
            return self
        start = time.perf_counter()
        _run(self._build_command(), self.build_dir, f"building the circuit with {self.name}", timeout)
        self.build_seconds = time.perf_counter() - start
        stamp.write_text(digest)
        self._built = True
        return self

    def execute(self, run_dir: Path, programs: int, max_cycles: int, host_port: bool = False,
                timeout: float = 900) -> str:
        """Run programs 0 .. programs-1 of ``run_dir``; the testbench's stdout."""
        self.build()
        args = [f"+dir={run_dir}", f"+programs={programs}", f"+max_cycles={max_cycles}"]
        if host_port:
            args.append("+host")
        return _run(self._run_command(args), run_dir, f"running the circuit in {self.name}", timeout)

    def close(self) -> None:
        """Remove the build folder if this simulator made it."""
        if self._own_dir and self._build_dir is not None:
            shutil.rmtree(self._build_dir, ignore_errors=True)
            self._build_dir = None
            self._built = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---------------------------------------------------------------- per simulator
    def _output(self) -> Path:
        raise NotImplementedError

    def _build_command(self) -> list[str]:
        raise NotImplementedError

    def _run_command(self, args: list[str]) -> list[str]:
        raise NotImplementedError

    def build_command_text(self) -> str:
        """The build command as a reader would type it (sources relative to ga2/rtl)."""
        paths = {str(p): str(p.relative_to(self.source_dir)) for p in sources.all_paths(self.source_dir)}
        return " ".join(paths.get(part, part) for part in self._build_command()).replace(str(self.build_dir) + "/", "")


class Icarus(Simulator):
    name = "Icarus"
    programs_needed = ("iverilog", "vvp")
    debian_package = "iverilog"

    def _output(self) -> Path:
        return self.build_dir / "ga2_tb.vvp"

    def _build_command(self) -> list[str]:
        return ["iverilog", "-g2012", "-Wall", "-s", sources.TB_TOP, "-o", str(self._output()),
                *map(str, sources.all_paths(self.source_dir))]

    def _run_command(self, args: list[str]) -> list[str]:
        return ["vvp", "-n", str(self._output()), *args]


class Verilator(Simulator):
    name = "Verilator"
    programs_needed = ("verilator",)
    debian_package = "verilator"

    def _output(self) -> Path:
        return self.build_dir / "obj" / "Vga2_tb"

    def _build_command(self) -> list[str]:
        jobs = str(max(1, min(2, os.cpu_count() or 1)))
        # the default warnings (the design alone is linted with -Wall: ga2.rtl.lint)
        return ["verilator", "--binary", "--timing", "--top-module", sources.TB_TOP,
                "-Mdir", str(self.build_dir / "obj"), "-j", jobs, *map(str, sources.all_paths(self.source_dir))]

    def _run_command(self, args: list[str]) -> list[str]:
        return [str(self._output()), *args]


SIMULATORS = {"icarus": Icarus, "verilator": Verilator}


def make_simulator(name: str, build_dir=None, source_dir=None) -> Simulator:
    """The simulator called ``name`` ("icarus" or "verilator"), not yet built; ``source_dir``
    holds the Verilog (default: ga2/rtl)."""
    try:
        cls = SIMULATORS[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown simulator {name!r} (have: {', '.join(SIMULATORS)})") from None
    return cls(build_dir, source_dir)


def available() -> list[str]:
    """Names of the simulators installed here."""
    return [name for name, cls in SIMULATORS.items() if cls.is_available()]
