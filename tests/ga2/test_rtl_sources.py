"""The Verilog itself: synthesizable constructs only, lint-clean, one module per file, the sizes
the model uses, and the softmax unit's table equal to its definition."""
import math
import re

import numpy as np
import pytest

from ga2 import limits
from ga2.rtl import exp_rom, simulators, sources, static_checks
from ga2.softmax import EXP_TABLE

from rtl_support import require

DESIGN = {name: (sources.RTL_DIR / name).read_text() for name, _ in sources.DESIGN}


def _code(text: str) -> str:
    """The text without comments and strings."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"[^"\n]*"', '""', text)


@pytest.mark.parametrize("name", list(DESIGN))
def test_each_file_holds_one_module_named_after_it(name):
    assert re.findall(r"^\s*module\s+(\w+)", _code(DESIGN[name]), re.M) == [name[:-2]]
    assert "`default_nettype none" in DESIGN[name]


@pytest.mark.parametrize("name", list(DESIGN))
def test_the_design_uses_synthesizable_constructs_only(name):
    code = _code(DESIGN[name])
    for construct in ("initial", "forever", "while", "wait", "fork", "real", "realtime", "time", "force", "deassign"):
        assert not re.search(rf"\b{construct}\b", code), f"{name}: '{construct}'"
    assert not re.search(r"#\s*[\d(]", code.replace("#(", "")), f"{name}: a delay"
    assert not re.search(r"\$(?!signed\b|unsigned\b)\w+", code), f"{name}: a system task"   # casts are fine
    # every for loop counts to a constant (a parameter or a literal)
    for bound in re.findall(r"\bfor\s*\([^;]*;\s*\w+\s*<\s*([^;]+);", code):
        assert re.fullmatch(r"[A-Z_0-9]+|\d+", bound.strip()), f"{name}: for loop bounded by {bound!r}"


def test_the_design_is_lint_clean_with_every_verilator_warning():
    require("verilator")
    assert static_checks.lint() == ""


def test_the_sizes_are_the_models():
    tb = (sources.RTL_DIR / sources.TESTBENCH).read_text()
    top = DESIGN["ga2.v"]
    const = lambda text, name: int(re.search(rf"\b{name}\s*=\s*(\d+)", text).group(1))
    assert (sources.EXT_WORDS, sources.SPAD_WORDS) == (limits.EXT_WORDS, limits.SPAD_WORDS) == (8192, 4096)
    for name, value in (("EXT_WORDS", sources.EXT_WORDS), ("SPAD_WORDS", sources.SPAD_WORDS),
                        ("IMEM_WORDS", sources.IMEM_WORDS), ("EXT_LATENCY", sources.EXT_LATENCY),
                        ("SPAD_LATENCY", sources.SPAD_LATENCY)):
        assert const(top, name) == const(tb, name) == value, name
    for words, bits in (("EXT_WORDS", "EXT_AW"), ("SPAD_WORDS", "SPAD_AW"), ("IMEM_WORDS", "IMEM_AW")):
        assert 2 ** const(top, bits) == const(top, words)


def test_the_exp_table_is_its_definition():
    values = exp_rom.exp_values()
    assert values[0] == 65536 and values[16] == math.floor(65536 / math.e) == 24109 and values[255] == 0
    assert values == [int(v) for v in EXP_TABLE]            # the model's table, computed in floats
    rom = DESIGN["ga2_exp_rom.v"]
    assert rom == exp_rom.rom_text(), "ga2_exp_rom.v is stale: python -m ga2.rtl.exp_rom rewrites it"
    cases = dict(map(int, pair) for pair in re.findall(r"8'd(\d+)\s*:\s*e <= 17'd(\d+);", rom))
    assert cases == dict(enumerate(values))
    assert all(np.diff(values) <= 0)


def test_builds_stay_out_of_the_source_tree():
    require("icarus")
    root = sources.RTL_DIR.parents[1]
    before = sorted(p.name for p in sources.RTL_DIR.rglob("*") if "__pycache__" not in p.parts)
    with simulators.make_simulator("icarus").build() as sim:
        assert root not in sim.build_dir.resolve().parents
        built = sim.build_dir
        assert any(built.iterdir())
    assert not built.exists()
    assert sorted(p.name for p in sources.RTL_DIR.rglob("*") if "__pycache__" not in p.parts) == before


def test_every_source_is_counted_in_the_sizes():
    rows = sources.module_lines()
    on_disk = sorted(p.name for p in sources.RTL_DIR.glob("*.v"))
    assert sorted(name for name, _, _ in rows if name.endswith(".v")) == on_disk
    assert all(lines > 10 for _, lines, _ in rows)
