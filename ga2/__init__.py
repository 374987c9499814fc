"""GA-2: the small int8 accelerator on which the course runs the attention decode step.

The contract is ``ga2/SPEC.md`` (the machine).  Modules, one concept each:

    isa          the instruction set: ``Instr``, ``build``, limits, text and binary forms, cycle model
                 (gathered from ``instructions``, ``limits``, ``listing``, ``encoding``, ``cycles``)
    machine      ``Machine``: EXT and SPAD, the units, the counters
    quant        int8 scales, quantization, requantization, the int8 matrix product
    softmax      the table-and-divider softmax unit and its real-number twin
    plan         the memory plan of the attention programs
    attn         one attention head's decode step as GA-2 programs (``cached``, ``recompute``)
    checks       the checks of the program builder: integer reference, stage-wise check, whole loops
    mutants      mutation testing of the program builder (``python -m ga2.mutants``)
    study        where the accuracy goes (``python -m ga2.study``)
    report       the published chapter's tables, from the model (``python -m ga2``)
    parts        the parts a learner builds (the requantizer, the attention tail) and
                 ``install(requant=...)``, which puts yours into the machine
    rtl          GA-2 as a circuit: synthesizable Verilog, run in Icarus and Verilator against the
                 machine (``python -m ga2.rtl``; a package of its own, imported on demand)
"""

# The library modules come with the package, but for ``attn``, the program builder, which only some
# users need (the sandbox of an exercise about it has none): it is imported on first use,
# ``ga2.attn`` and ``from ga2 import attn`` alike.  mutants, study and report are programs too
# (python -m ga2.mutants, ...), so they are imported on demand: importing them here would
# make ``python -m`` run a second copy.
from . import isa, machine, quant, softmax, plan, checks, parts  # noqa: E402,F401
from .parts import install, install_from, missing, uninstall  # noqa: E402,F401

__all__ = ["isa", "machine", "quant", "softmax", "plan", "attn", "checks", "parts",
           "install", "install_from", "uninstall", "missing"]

_ON_FIRST_USE = ("attn",)


def __getattr__(name: str):
    """``ga2.attn`` imports the builder the first time it is read (PEP 562)."""
    if name in _ON_FIRST_USE:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
