"""What the circuit's tests share: one build of each simulator per test module.

The circuit's tests need Icarus Verilog and Verilator (Debian's iverilog and verilator, which
``make system-deps`` installs before ``make test``).  Without one, its tests FAIL and say what
to install: a skipped test would read as a pass.
"""
from __future__ import annotations

import pytest

from ga2.rtl import simulators

SIMULATOR_NAMES = ("icarus", "verilator")


def require(name: str) -> None:
    """Fail the calling test, naming the package, when simulator ``name`` is not installed."""
    cls = simulators.SIMULATORS[name]
    missing = cls.missing()
    if missing:
        pytest.fail(f"{cls.name} is needed by the circuit's tests but {', '.join(missing)} is not on PATH: "
                    f"run `make system-deps` (Debian package {cls.debian_package})", pytrace=False)


@pytest.fixture(scope="module", params=SIMULATOR_NAMES)
def simulator(request):
    """A built simulator, each in turn (its build is removed after the module's tests)."""
    require(request.param)
    sim = simulators.make_simulator(request.param).build()
    yield sim
    sim.close()


@pytest.fixture(scope="module")
def icarus():
    """A built Icarus (the quick one to build)."""
    require("icarus")
    sim = simulators.make_simulator("icarus").build()
    yield sim
    sim.close()
