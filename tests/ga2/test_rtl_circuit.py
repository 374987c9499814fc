"""The circuit (ga2/rtl) in both simulators: the ten attention programs, each unit against
numbers that do not come from the model, the cost of every instruction, the host port, and
programs the circuit must never see."""
from fractions import Fraction
import math

import numpy as np
import pytest

from ga2 import attn, rtl
from ga2.cycles import CycleCounts
from ga2.instructions import build
from ga2.limits import ProgramError
from ga2.machine import Machine
from ga2.rtl import circuit, compare, images, simulators, sources

from published_figures import PUBLISHED_CYCLE_TABLE, PUBLISHED_SOFTMAX_IN, PUBLISHED_SOFTMAX_OUT
from rtl_support import icarus, require, simulator  # noqa: F401  (fixtures)

HALT = build("HALT")


def _signed_byte(words):
    """The int8 in the low byte of each word, written out here (not the model's helper)."""
    low = np.asarray(words, dtype=np.int64) & 0xFF
    return np.where(low >= 128, low - 256, low)


# ---------------------------------------------------------------- the ten attention programs
def test_the_ten_attention_programs_match_the_model_and_the_seed_table(simulator):
    cases = rtl.attention_programs()
    runs = rtl.run(cases, sim=simulator)
    assert [run.label for run in runs] == [f"L={L} {v}" for L in (2, 4, 8, 16, 32) for v in ("cached", "recompute")]
    for case, run in zip(cases, runs):
        assert compare.first_difference(run, compare.model_run(case)) is None
        L, variant = case.label[2:].split()
        instr, total, matrix, dma, vector = PUBLISHED_CYCLE_TABLE[(int(L), variant)]
        assert run.counters == CycleCounts(total, matrix, dma, vector, instr)
    assert sum(run.total for run in runs) == 53_292
    # the step computed both ways gives the same output, on the circuit too
    for cached, recompute in zip(runs[::2], runs[1::2]):
        out = slice(attn.EX_OUT, attn.EX_OUT + attn.D)
        assert np.array_equal(cached.ext[out], recompute.ext[out]) and np.any(cached.ext[out] != 0)


# ---------------------------------------------------------------- every instruction's cost
def _spec_wait(ins) -> int:
    """The wait of the spec's cycle table, written out from ga2/SPEC.md."""
    f = ins.fields
    if ins.op == "LD":
        return f["len"] + 9
    if ins.op == "ST":
        return f["len"] + 2
    if ins.op == "RQ":
        return f["len"] + 2
    if ins.op == "SM":
        return 3 * f["len"] + 47
    M, K, N = f["M"], f["K"], f["N"]
    return M * K + K * N + M * N + M + K + N + 5


COST_CASES = [
    build("LD", dst=0, src=0, len=1), build("LD", dst=100, src=8000, len=192), build("LD", dst=0, src=0, len=4096),
    build("ST", src=0, dst=0, len=1), build("ST", src=3000, dst=5000, len=1096),
    build("MM", dst=3000, A=0, B=100, M=1, K=1, N=1, lda=1, ldb=1, ldc=1),
    build("MM", dst=3000, A=0, B=300, M=4, K=64, N=4, lda=64, ldb=4, ldc=4),
    build("MM", dst=3000, A=0, B=300, M=2, K=7, N=3, tb=1, lda=7, ldb=7, ldc=3),
    build("MM", dst=3000, A=0, B=300, M=3, K=64, N=1, tb=1, lda=0, ldb=64, ldc=0),
    build("RQ", dst=0, src=0, len=1, m=1, s=0), build("RQ", dst=10, src=0, len=300, m=8883301, s=33, relu=1),
    build("SM", dst=500, src=0, len=1), build("SM", dst=500, src=0, len=3), build("SM", dst=0, src=10, len=256),
]


def test_every_instruction_costs_two_issue_cycles_plus_the_spec_wait(simulator):
    runs = rtl.run([([ins, HALT], None) for ins in COST_CASES], sim=simulator)
    for ins, run in zip(COST_CASES, runs):
        wait = _spec_wait(ins)
        unit = {"LD": "dma", "ST": "dma", "MM": "matrix", "RQ": "vector", "SM": "vector"}[ins.op]
        want = {"total": 2 + wait + 2, "matrix": 0, "dma": 0, "vector": 0, "instructions": 1, unit: wait}
        assert run.counters._asdict() == want, ins


def test_halt_alone_costs_its_two_issue_cycles(simulator):
    (run,) = rtl.run([([HALT], None)], sim=simulator)
    assert run.status == "HALT" and run.counters == CycleCounts(2, 0, 0, 0, 0)
    assert not run.ext.any() and not run.spad.any()


# ---------------------------------------------------------------- the units, against numbers of their own
def test_softmax_unit_gives_the_running_example(simulator):
    # scores in the low bytes; the other bytes of the words must not matter
    spad = np.zeros(sources.SPAD_WORDS, dtype=np.int64)
    spad[40:44] = [(0x5A5A5A00 | (x & 0xFF)) for x in PUBLISHED_SOFTMAX_IN]
    spad[100:104] = PUBLISHED_SOFTMAX_IN
    program = [build("SM", dst=200, src=40, len=4), build("SM", dst=300, src=100, len=4), HALT]
    (run,) = rtl.run([(program, None, spad)], sim=simulator)
    assert run.spad[200:204].tolist() == PUBLISHED_SOFTMAX_OUT
    assert run.spad[300:304].tolist() == PUBLISHED_SOFTMAX_OUT


def test_softmax_unit_over_the_whole_score_range(simulator):
    # d = max - x spans 0 .. 255; probabilities from the definition in exact arithmetic
    scores = np.array([127, -128, 0, 126, -127, 5, 127, 64], dtype=np.int64)
    spad = np.zeros(sources.SPAD_WORDS, dtype=np.int64)
    spad[1000:1008] = scores
    (run,) = rtl.run([([build("SM", dst=1004, src=1000, len=8), HALT], None, spad)], sim=simulator)
    e = [math.floor(65536 * math.exp(-(127 - int(x)) / 16)) for x in scores]   # no value is near an integer
    z = sum(e)
    assert run.spad[1004:1012].tolist() == [(v * 65536 + z // 2) // z for v in e]


def _requant_exact(acc, m, s, relu):
    """sat127(round_half_away(acc * m / 2^s)), max(0, .) if relu: the spec's words, in fractions."""
    x = Fraction(acc * m, 2 ** s)
    q = math.floor(abs(x) + Fraction(1, 2)) * (1 if x >= 0 else -1)
    q = max(-127, min(127, q))
    return max(0, q) if relu else q


@pytest.mark.parametrize("m,s,relu", [(16646144, 33, 0), (1 << 23, 24, 0), (1 << 23, 24, 1), ((1 << 24) - 1, 0, 0),
                                      (8883301, 33, 0), (1, 63, 0), (12345, 5, 1)])
def test_requantizer_rounds_and_saturates_as_the_spec_says(simulator, m, s, relu):
    accs = [0, 1, -1, 2, -2, 3, -3, 65536, -65536, 127, -127, 255, -255, 2**31 - 1, -2**31, 1 << 20, -(1 << 20),
            32768, 98304, -98304, 8191, -8193]
    spad = np.zeros(sources.SPAD_WORDS, dtype=np.int64)
    spad[0:len(accs)] = accs
    (run,) = rtl.run([([build("RQ", dst=100, src=0, len=len(accs), m=m, s=s, relu=relu), HALT], None, spad)],
                     sim=simulator)
    assert run.spad[100:100 + len(accs)].tolist() == [_requant_exact(a, m, s, relu) for a in accs]


@pytest.mark.parametrize("tb", [0, 1])
def test_matrix_unit_multiplies_int8_matrices(simulator, tb):
    rng = np.random.default_rng(7 + tb)
    spad = rng.integers(-2**31, 2**31, sources.SPAD_WORDS)        # operands are the low bytes
    spad[0:64] = -128                                             # and an extreme row
    cases = []
    for M, K, N in ((4, 64, 4), (1, 16, 3), (3, 5, 2), (2, 1, 4)):
        lda, ldb, ldc = 64, 40, 9
        program = [build("MM", dst=3500, A=0, B=600, M=M, K=K, N=N, tb=tb, lda=lda, ldb=ldb, ldc=ldc), HALT]
        a = _signed_byte([[spad[i * lda + k] for k in range(K)] for i in range(M)])
        if tb:
            b = _signed_byte([[spad[600 + j * ldb + k] for j in range(N)] for k in range(K)])
        else:
            b = _signed_byte([[spad[600 + k * ldb + j] for j in range(N)] for k in range(K)])
        cases.append(((M, N, ldc), a @ b, (program, None, spad)))
    runs = rtl.run([case for *_, case in cases], sim=simulator)
    for ((M, N, ldc), product, _), run in zip(cases, runs):
        got = np.array([[run.spad[3500 + i * ldc + j] for j in range(N)] for i in range(M)])
        assert np.array_equal(got, product)


def test_overlapping_operands_and_results_match_the_model(simulator):
    """Vector units read their whole source first; MM stages A and B before it writes C;
    overlapping output rows are written in order."""
    spad = np.random.default_rng(3).integers(-300, 300, sources.SPAD_WORDS)
    programs = [
        [build("RQ", dst=105, src=100, len=40, m=1 << 23, s=23), HALT],            # dst above src
        [build("RQ", dst=95, src=100, len=40, m=1 << 23, s=22), HALT],             # dst below src
        [build("SM", dst=203, src=200, len=30), HALT],
        [build("SM", dst=190, src=200, len=30), HALT],
        [build("MM", dst=10, A=0, B=20, M=4, K=8, N=4, lda=8, ldb=4, ldc=2), HALT],  # C over A and B, rows overlap
        [build("MM", dst=0, A=0, B=0, M=4, K=4, N=4, tb=1, lda=4, ldb=4, ldc=0), HALT],
    ]
    cases = [rtl.Case(f"overlap {k}", p, None, spad) for k, p in enumerate(programs)]
    for case, run in zip(cases, rtl.run(cases, sim=simulator)):
        assert compare.first_difference(run, compare.model_run(case)) is None, case.label


def test_ld_and_st_move_whole_words_at_the_memory_ends(simulator):
    ext = np.random.default_rng(5).integers(-2**31, 2**31, sources.EXT_WORDS)
    program = [build("LD", dst=0, src=sources.EXT_WORDS - sources.SPAD_WORDS, len=sources.SPAD_WORDS),
               build("ST", src=sources.SPAD_WORDS - 1, dst=0, len=1),
               build("ST", src=0, dst=sources.EXT_WORDS - 7, len=7), HALT]
    (run,) = rtl.run([(program, ext)], sim=simulator)
    assert np.array_equal(run.spad, ext[-sources.SPAD_WORDS:])
    assert run.ext[0] == ext[-1]
    assert np.array_equal(run.ext[-7:], ext[-sources.SPAD_WORDS:][:7])
    assert np.array_equal(run.ext[1:-7], ext[1:-7])


# ---------------------------------------------------------------- the ways in and out
def test_host_port_loads_and_dumps_what_the_direct_path_does(simulator):
    case = rtl.attention_programs(lengths=(3,))[0]
    rng = np.random.default_rng(11)
    other = rtl.Case("random", [build("MM", dst=4000, A=0, B=9, M=3, K=9, N=2, lda=9, ldb=2, ldc=2),
                                build("ST", src=4000, dst=8190, len=2), HALT],
                     rng.integers(-2**31, 2**31, sources.EXT_WORDS), rng.integers(-2**31, 2**31, sources.SPAD_WORDS))
    direct = rtl.run([case, other], sim=simulator)
    hosted = rtl.run([case, other], sim=simulator, host_port=True)
    for a, b in zip(direct, hosted):
        assert a.counters == b.counters and np.array_equal(a.ext, b.ext) and np.array_equal(a.spad, b.spad)
    assert compare.first_difference(hosted[1], compare.model_run(other)) is None


def test_a_decode_step_goes_in_as_a_program_run(simulator):
    step = attn.sequence(attn.make_example(2, 5))[-1]
    runs = rtl.run([step.cached, step.recompute], sim=simulator)
    assert [r.counters for r in runs] == [step.cached.counters, step.recompute.counters]
    assert runs[0].ext[attn.EX_OUT:attn.EX_OUT + attn.D].astype(np.int8).tolist() == step.cached.output


def test_an_unknown_opcode_stops_the_circuit_with_a_fault(icarus, tmp_path):
    # the validation never lets such an image through, so it is written by hand here
    ld = [(1 << 28) | 5, (0 << 16) | 0]                 # LD dst=0 src=0 len=5
    images.write_case(tmp_path, 0, [0x70000000], np.zeros(sources.EXT_WORDS), np.zeros(sources.SPAD_WORDS))
    images.write_case(tmp_path, 1, ld + [0xF0000000, 0], np.arange(sources.EXT_WORDS), np.zeros(sources.SPAD_WORDS))
    results = images.parse_results(icarus.execute(tmp_path, 2, max_cycles=1000), 2)
    assert [r.status for r in results] == ["FAULT", "FAULT"]
    assert results[0].counters == CycleCounts(2, 0, 0, 0, 0)
    assert results[1].counters == CycleCounts(2 + 14 + 2, 0, 14, 0, 1)
    (spad, undefined) = images.read_words(tmp_path / "spad_out_1.hex", sources.SPAD_WORDS)
    assert spad[:6].tolist() == [0, 1, 2, 3, 4, 0] and undefined.size == 0


# ---------------------------------------------------------------- what never reaches a simulator
class _Untouchable(simulators.Icarus):
    """A simulator that fails the test if anything starts it."""

    def build(self, *args, **kwargs):
        raise AssertionError("a simulator was started for an invalid program")

    execute = build


BAD_PROGRAMS = [
    ([build("MM", dst=0, A=0, B=0, M=5, K=1, N=1, lda=1, ldb=1, ldc=1), HALT], 0, "M"),
    ([build("LD", dst=4090, src=0, len=7), HALT], 0, "dst"),
    ([build("ST", src=0, dst=8190, len=3), HALT], 0, "dst"),
    ([build("RQ", dst=0, src=0, len=4, m=1 << 24, s=0), HALT], 0, "m"),
    ([build("SM", dst=0, src=0, len=2)], 1, "op"),                               # no HALT
    ([HALT, build("LD", dst=0, src=0, len=1), HALT], 0, "op"),
    ([build("MM", dst=0, A=0, B=0, M=1, K=65, N=1, lda=1, ldb=1, ldc=1), HALT], 0, "K"),
    ([{"op": "NOP"}, HALT], 0, "op"),
]


@pytest.mark.parametrize("program,index,field", BAD_PROGRAMS)
def test_an_invalid_program_is_refused_before_simulation_as_the_model_refuses_it(program, index, field):
    good = rtl.attention_programs(lengths=(2,))[0]
    with pytest.raises(ProgramError) as refused:
        rtl.run([good, (program, None)], sim=_Untouchable())
    assert (refused.value.index, refused.value.field) == (index, field)
    with pytest.raises(ProgramError) as model:
        Machine().run(program)
    assert str(refused.value) == str(model.value)


def test_a_program_too_long_for_the_program_memory_is_refused_before_simulation():
    program = [build("MM", dst=0, A=0, B=0, M=1, K=1, N=1, lda=1, ldb=1, ldc=1)] * 1023 + [HALT]
    with pytest.raises(circuit.CircuitLimitError, match="4093 words of program"):
        rtl.run([(program, None)], sim=_Untouchable())


def test_a_missing_simulator_is_named_with_its_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert simulators.available() == []
    with pytest.raises(simulators.SimulatorUnavailable, match="Debian package iverilog"):
        rtl.run(rtl.attention_programs(lengths=(2,)), sim="icarus")
    verdict = compare.check(rtl.attention_programs(lengths=(2,)), "verilator")
    assert not verdict.passed and verdict.line().startswith("Verilator  UNAVAILABLE: Verilator is not installed")


def test_a_run_leaves_no_build_or_run_folder_behind(monkeypatch, tmp_path):
    import tempfile

    require("icarus")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (run,) = rtl.run(rtl.attention_programs(lengths=(2,))[:1], sim="icarus")
    assert run.status == "HALT"
    with pytest.raises(ProgramError):
        rtl.run([([build("LD", dst=0, src=0, len=0), HALT], None)], sim="icarus")
    _Untouchable().close()
    assert list(tmp_path.iterdir()) == []
