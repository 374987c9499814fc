"""Random valid programs on the circuit and on the model: word for word, cycle for cycle.

The programs come from ``ga2.rtl.fuzz`` (fixed seed).  One test runs them in each simulator (one
build, one invocation for all of them); one shows they reach what a fuzz test of this machine
must reach (every op, both tb, M, N < 4, strides, saturation, ReLU, overlaps, long softmaxes),
measured on the model's run of them; one shows the comparison catches a circuit that is wrong
(mutated copies of the Verilog, in Icarus).
"""
from collections import Counter
import shutil

import numpy as np
import pytest

from ga2.cycles import cycle_counts
from ga2.machine import Machine
from ga2.rtl import compare, fuzz, simulators, sources

from rtl_support import require, simulator  # noqa: F401  (fixture)

FUZZ_SEED = 2024
FUZZ_PROGRAMS = 300
MUTANT_PROGRAMS = 100     # at most, of the same set (each mutant below is caught well before)


@pytest.fixture(scope="module")
def cases():
    return fuzz.random_cases(FUZZ_PROGRAMS, FUZZ_SEED)


def test_random_programs_agree_with_the_model_word_for_word_and_cycle_for_cycle(simulator, cases):
    verdict = compare.check(cases, simulator)
    assert verdict.passed, verdict.line()
    assert verdict.programs == FUZZ_PROGRAMS
    assert verdict.total_cycles == sum(cycle_counts(case.program).total for case in cases)


# ---------------------------------------------------------------- what the programs reach
def _int8(words):
    low = np.asarray(words, dtype=np.int64) & 0xFF
    return np.where(low >= 128, low - 256, low)


def _overlap(a0, a1, b0, b1) -> bool:
    """Do the address ranges [a0, a1] and [b0, b1] share a word?"""
    return a0 <= b1 and b0 <= a1


def _features(ins, spad) -> set[str]:
    """What one instruction exercises, given SPAD before it (int32 words)."""
    op, f = ins.op, ins.fields
    seen = {op}
    if op in ("LD", "ST"):
        seen |= {f"{op} len 1"} if f["len"] == 1 else {f"{op} len > 64"} if f["len"] > 64 else set()
    elif op == "MM":
        M, K, N, tb = f["M"], f["K"], f["N"], f["tb"]
        seen |= {f"MM tb={tb}", "MM M<4" if M < 4 else "MM M=4", "MM N<4" if N < 4 else "MM N=4"}
        seen |= {"MM K=1"} if K == 1 else {"MM K=64"} if K == 64 else set()
        if M > 1 and f["lda"] == 0 or (N if tb else K) > 1 and f["ldb"] == 0:
            seen.add("MM operand stride 0")
        if M > 1 and f["ldc"] < N:
            seen.add("MM output rows overlap")
        a = (f["A"], f["A"] + (M - 1) * f["lda"] + K - 1)
        b = (f["B"], f["B"] + ((N - 1) * f["ldb"] + K if tb else (K - 1) * f["ldb"] + N) - 1)
        c = (f["dst"], f["dst"] + (M - 1) * f["ldc"] + N - 1)
        if _overlap(*c, *a) or _overlap(*c, *b):
            seen.add("MM output overlaps an operand")
        rows = _int8([spad[f["A"] + i * f["lda"]:f["A"] + i * f["lda"] + K] for i in range(M)])
        if (rows == -128).any():
            seen.add("MM operand -128")
    elif op == "RQ":
        m, s, n = f["m"], f["s"], f["len"]
        p = spad[f["src"]:f["src"] + n].astype(object) * m
        seen |= {"RQ relu"} if f["relu"] else set()
        seen |= {"RQ s=0"} if s == 0 else {"RQ s>=62"} if s >= 62 else set()
        if s > 0 and any(v % (1 << s) == 1 << (s - 1) and v != 0 for v in p):
            seen.add("RQ rounding tie")
        if any(abs(v) >= (127 << s) + (1 << s) for v in p):
            seen.add("RQ saturates")
    if op in ("RQ", "SM") and f["dst"] != f["src"] and _overlap(f["dst"], f["dst"] + f["len"] - 1, f["src"],
                                                                 f["src"] + f["len"] - 1):
        seen.add(f"{op} dst overlaps src from {'above' if f['dst'] > f['src'] else 'below'}")
    if op == "SM":
        scores = _int8(spad[f["src"]:f["src"] + f["len"]])
        seen |= {"SM len 1"} if f["len"] == 1 else {"SM len > 64"} if f["len"] > 64 else set()
        if scores.max() - scores.min() == 255:
            seen.add("SM d = 255")
    return seen


WANTED = {
    "LD", "ST", "MM", "RQ", "SM", "LD len 1", "LD len > 64", "ST len 1", "ST len > 64",
    "MM tb=0", "MM tb=1", "MM M<4", "MM M=4", "MM N<4", "MM N=4", "MM K=1", "MM K=64", "MM operand stride 0",
    "MM output rows overlap", "MM output overlaps an operand", "MM operand -128",
    "RQ relu", "RQ s=0", "RQ s>=62", "RQ rounding tie", "RQ saturates",
    "RQ dst overlaps src from above", "RQ dst overlaps src from below",
    "SM len 1", "SM len > 64", "SM d = 255", "SM dst overlaps src from above", "SM dst overlaps src from below",
}


def test_the_random_programs_reach_every_op_field_and_edge(cases):
    counts = Counter()
    for case in cases:
        machine = Machine(case.ext, case.spad)
        before = [machine.spad.copy()]

        def look(index, ins, after):
            counts.update(_features(ins, before[0]))
            before[0] = after.spad.copy()

        machine.run(case.program, trace=look)
    missing = {feature: counts[feature] for feature in WANTED if counts[feature] < 3}
    assert not missing, f"reached fewer than 3 times: {missing}"


# ---------------------------------------------------------------- a wrong circuit is caught
MUTANTS = [
    ("the requantizer rounds negative halves up", "ga2_rq.v",
     "wire               away    = product[56] && s_r != 6'd0;", "wire               away    = 1'b0;"),
    ("the requantizer walks upwards even when dst lies above src", "ga2_rq.v",
     "down   <= dst > src;", "down   <= 1'b0;"),
    ("the divider's rounding (z / 2) is left out", "ga2_sm.v",
     "numerator <= {e, 16'd0} + {5'd0, z[28:1]};", "numerator <= {e, 16'd0};"),
    ("the array multiplies int8 operands as unsigned", "ga2_pe.v",
     "product <= a_out * b_out;", "product <= $unsigned(a_out) * $unsigned(b_out);"),
    ("the drain writes C column by column", "ga2_mm.v",
     "out_word <= acc[32 * {ci, cj} +: 32];", "out_word <= acc[32 * {cj, ci} +: 32];"),
    ("EXT answers a cycle early (LD waits len + 8)", "ga2.v",
     "localparam integer EXT_LATENCY = 8, SPAD_LATENCY = 1;", "localparam integer EXT_LATENCY = 7, SPAD_LATENCY = 1;"),
    ("HALT is counted as an instruction", "ga2_control.v",
     "OP_HALT: state <= S_HALTED;", "OP_HALT: begin state <= S_HALTED; cnt_instr <= cnt_instr + 32'd1; end"),
]


@pytest.mark.parametrize("label,filename,old,new", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_mutated_circuit_fails_the_comparison(cases, tmp_path, label, filename, old, new):
    require("icarus")
    copy = tmp_path / "rtl"
    shutil.copytree(sources.RTL_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    text = (copy / filename).read_text()
    assert text.count(old) == 1, "the mutant's anchor must occur once"
    (copy / filename).write_text(text.replace(old, new))
    with simulators.make_simulator("icarus", source_dir=copy) as mutant:
        for start in range(0, MUTANT_PROGRAMS, 10):       # batches of 10, until one differs
            verdict = compare.check(cases[start:start + 10], mutant)
            if not verdict.passed:
                break
    assert not verdict.passed and verdict.difference is not None
    assert verdict.line().startswith("Icarus     FAIL: program fuzz ")
