"""``python -m ga2.rtl``: one line per simulator, PASS with the total cycles or the first
difference, and an exit status that is 0 only when everything matched."""
import os
import re
import shutil
import subprocess
import sys

from ga2.rtl import sources

from rtl_support import require

PASS = re.compile(r"^Icarus +PASS: 10 programs match the Python reference \(memory and all five cycle counters\), "
                  r"53292 cycles in total \(build \d+\.\d+ s, run \d+\.\d+ s\)$")


def _cli(*args, path=None):
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = str(path)
    done = subprocess.run([sys.executable, "-m", "ga2.rtl", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=sources.RTL_DIR.parents[1])
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_icarus_passes_the_ten_programs_with_53292_cycles():
    require("icarus")
    require("verilator")          # for --lint
    status, lines, _ = _cli("--sim", "icarus", "--lint", "--sizes")
    assert status == 0
    assert PASS.match(lines[-1]), lines[-1]
    assert lines[-2] == "lint       clean: verilator --lint-only -Wall (the design, every module)"
    assert re.match(r"^  design +\d+ lines in 12 modules$", lines[-3])


def test_without_any_simulator_it_says_so_and_fails(tmp_path):
    status, lines, _ = _cli(path=tmp_path)
    assert status == 2
    assert lines == ["no simulator to run the circuit: install iverilog or verilator (make system-deps installs both)"]


def test_a_missing_simulator_is_a_line_of_its_own_and_a_failure(tmp_path):
    require("icarus")
    for program in ("iverilog", "vvp"):
        os.symlink(shutil.which(program), tmp_path / program)
    status, lines, _ = _cli("--sim", "both", path=tmp_path)
    assert status == 2
    assert len(lines) == 2 and PASS.match(lines[0])
    assert lines[1].startswith("Verilator  UNAVAILABLE: Verilator is not installed (verilator not found on PATH)")


def test_a_difference_is_reported_with_the_program_the_counter_and_both_values(tmp_path):
    require("icarus")
    copy = tmp_path / "rtl"
    shutil.copytree(sources.RTL_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    control = copy / "ga2_control.v"
    control.write_text(control.read_text().replace(
        "OP_HALT: state <= S_HALTED;", "OP_HALT: begin state <= S_HALTED; cnt_instr <= cnt_instr + 32'd1; end"))
    status, lines, _ = _cli("--sim", "icarus", "--rtl-dir", str(copy))
    assert status == 1
    assert re.match(r"^Icarus +FAIL: program L=2 cached: counter instructions: circuit 32, model 31; "
                    r"53292 cycles in total \(build", lines[0])


def test_the_benchmark_checks_what_it_times():
    require("icarus")
    from bench import bench_rtl
    from ga2.rtl import fuzz

    lines = bench_rtl.measure("icarus", {"two random programs": fuzz.random_cases(2, 1)})
    assert lines[0].startswith("  Icarus     build")
    assert re.match(r"^  Icarus     two random programs +\d+\.\d+ s +[\d,]+ cycles +[\d,]+ cycles/s  \(PASS\)$", lines[1])
