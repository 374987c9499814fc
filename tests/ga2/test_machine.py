"""ga2.machine: each unit against direct arithmetic, the counters, and refused programs.

The references here are written independently of ga2: plain Python integers and
fractions, word by word, from the spec's definitions.
"""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ga2.isa import Instr, ProgramError, build, cycle_counts
from ga2.machine import EXT_WORDS, SPAD_WORDS, Machine

SETTINGS = settings(max_examples=120, derandomize=True, deadline=None, database=None)
HALT = build("HALT")
SMALL = 256  # a small scratchpad for the property tests, so regions overlap often

EDGE_WORDS = [0, 1, -1, 127, -127, 128, -128, 129, 255, 256, 383, 2 ** 31 - 1, -2 ** 31, 0x7F7F7F7F, -0x7F7F7F80]
seeds = st.integers(0, 2 ** 32 - 1)


def memory_from(seed: int, size: int) -> list[int]:
    """Words for a memory, from a seed: a third full-range int32, a third small, a third edge values."""
    rng = np.random.default_rng(seed)
    full = rng.integers(-2 ** 31, 2 ** 31, size)
    small = rng.integers(-4096, 4097, size)
    edge = rng.choice(EDGE_WORDS, size)
    kind = rng.integers(0, 3, size)
    return [int(v) for v in np.choose(kind, [full, small, edge])]


def signed_byte(word: int) -> int:
    """The spec's int8 reading of a word: its low byte as a signed value."""
    b = word & 0xFF
    return b - 256 if b >= 128 else b


def as_word(value: int) -> int:
    """A Python int stored in a 32-bit word, read back as signed."""
    value &= 0xFFFFFFFF
    return value - 2 ** 32 if value >= 2 ** 31 else value


def run_small(spad, program):
    return Machine(spad=spad, spad_words=SMALL).run(program + [HALT])


# ---------------------------------------------------------------- MM
@st.composite
def matmul_case(draw):
    M, K, N = draw(st.integers(1, 4)), draw(st.integers(1, 64)), draw(st.integers(1, 4))
    tb = draw(st.integers(0, 1))
    lda, ldb, ldc = (draw(st.integers(0, 70)) for _ in range(3))
    a_extent = (M - 1) * lda + K
    b_extent = (N - 1) * ldb + K if tb else (K - 1) * ldb + N
    c_extent = (M - 1) * ldc + N
    if max(a_extent, b_extent, c_extent) > SMALL:
        lda = ldb = ldc = 0
        a_extent, b_extent, c_extent = K, K if tb else N, N
        if max(a_extent, b_extent, c_extent) > SMALL:
            return None
    A = draw(st.integers(0, SMALL - a_extent))
    B = draw(st.integers(0, SMALL - b_extent))
    dst = draw(st.integers(0, SMALL - c_extent))
    spad = memory_from(draw(seeds), SMALL)
    return spad, build("MM", dst=dst, A=A, B=B, M=M, K=K, N=N, tb=tb, lda=lda, ldb=ldb, ldc=ldc)


@SETTINGS
@given(matmul_case())
def test_mm_matches_direct_arithmetic(case):
    if case is None:
        return
    spad, ins = case
    f = ins.fields
    C = [[sum(signed_byte(spad[f["A"] + i * f["lda"] + k]) *
              signed_byte(spad[f["B"] + (j * f["ldb"] + k if f["tb"] else k * f["ldb"] + j)])
              for k in range(f["K"])) for j in range(f["N"])] for i in range(f["M"])]
    want = list(spad)
    for i in range(f["M"]):          # C is written after it is computed, row by row
        for j in range(f["N"]):
            want[f["dst"] + i * f["ldc"] + j] = C[i][j]
    got = run_small(spad, [ins]).spad
    assert [int(v) for v in got] == [as_word(v) for v in want]


def test_mm_saturation_edges_are_exact():
    # K = 64 products of -128 * -128: the largest accumulator, 2^20, and its negative.
    spad = [-128] * 128 + [127] * 64 + [0] * (SMALL - 192)
    got = run_small(spad, [build("MM", dst=200, A=0, B=64, M=1, K=64, N=1, lda=64, ldb=1, ldc=1),
                           build("MM", dst=201, A=0, B=128, M=1, K=64, N=1, lda=64, ldb=1, ldc=1)]).spad
    assert int(got[200]) == 64 * 128 * 128 and int(got[201]) == -64 * 128 * 127


def test_mm_transposed_b_reads_rows_as_columns():
    # B holds two rows [1, 2, 3] and [4, 5, 6] (ldb = 3); with tb=1 they are the columns of B'.
    spad = [1, 1, 1] + [1, 2, 3, 4, 5, 6] + [0] * (SMALL - 9)
    got = run_small(spad, [build("MM", dst=20, A=0, B=3, M=1, K=3, N=2, tb=1, lda=3, ldb=3, ldc=2)]).spad
    assert [int(v) for v in got[20:22]] == [6, 15]


# ---------------------------------------------------------------- RQ
def reference_requant(acc: int, m: int, s: int, relu: int) -> int:
    x = Fraction(acc * m, 2 ** s)
    r = math.floor(abs(x) + Fraction(1, 2))
    q = max(-127, min(127, r if x >= 0 else -r))
    return max(0, q) if relu else q


@SETTINGS
@given(st.data())
def test_rq_matches_exact_fractions(data):
    n = data.draw(st.integers(1, 40))
    src = data.draw(st.integers(0, SMALL - n))
    dst = data.draw(st.integers(0, SMALL - n))   # may overlap src: the unit reads before it writes
    m = data.draw(st.one_of(st.integers(0, 2 ** 24 - 1), st.sampled_from([0, 1, 2 ** 23, 2 ** 24 - 1])))
    s = data.draw(st.one_of(st.integers(0, 63), st.sampled_from([0, 1, 23, 24, 62, 63])))
    relu = data.draw(st.integers(0, 1))
    spad = memory_from(data.draw(seeds), SMALL)
    want = list(spad)
    for i in range(n):
        want[dst + i] = reference_requant(spad[src + i], m, s, relu)
    got = run_small(spad, [build("RQ", dst=dst, src=src, len=n, m=m, s=s, relu=relu)]).spad
    assert [int(v) for v in got] == want


@pytest.mark.parametrize("acc, m, s, relu, want", [
    (3, 1, 1, 0, 2), (-3, 1, 1, 0, -2), (5, 1, 1, 0, 3), (-5, 1, 1, 0, -3),   # halves go away from zero
    (1, 1, 1, 0, 1), (-1, 1, 1, 0, -1), (1, 1, 2, 0, 0), (-1, 1, 2, 0, 0),
    (2 ** 31 - 1, 2 ** 24 - 1, 0, 0, 127), (-2 ** 31, 2 ** 24 - 1, 0, 0, -127),  # saturation at +-127
    (-2 ** 31, 2 ** 24 - 1, 0, 1, 0), (-5, 1, 0, 1, 0), (5, 1, 0, 1, 5),          # ReLU
    (2 ** 31 - 1, 2 ** 24 - 1, 63, 0, 0), (255, 1, 1, 0, 127), (-254, 1, 1, 0, -127),
])
def test_rq_edges(acc, m, s, relu, want):
    got = run_small([acc] + [0] * (SMALL - 1), [build("RQ", dst=1, src=0, len=1, m=m, s=s, relu=relu)]).spad
    assert int(got[1]) == want


# ---------------------------------------------------------------- SM
def reference_softmax(scores):
    table = [math.floor(65536 * math.exp(-d / 16)) for d in range(256)]
    top = max(scores)
    e = [table[top - x] for x in scores]
    z = sum(e)
    return [(v * 65536 + z // 2) // z for v in e]


@SETTINGS
@given(st.data())
def test_sm_matches_the_table_and_divider(data):
    n = data.draw(st.integers(1, 40))
    src = data.draw(st.integers(0, SMALL - n))
    dst = data.draw(st.integers(0, SMALL - n))
    spad = memory_from(data.draw(seeds), SMALL)
    want = list(spad)
    for i, p in enumerate(reference_softmax([signed_byte(w) for w in spad[src:src + n]])):
        want[dst + i] = p
    got = run_small(spad, [build("SM", dst=dst, src=src, len=n)]).spad
    assert [int(v) for v in got] == want


def test_sm_edges():
    # the full range of d = 255 (127 vs -128), a single score, all equal scores
    got = run_small([127, -128, 5, 7, 7, 7, 7] + [0] * (SMALL - 7),
                    [build("SM", dst=100, src=0, len=2), build("SM", dst=110, src=2, len=1),
                     build("SM", dst=120, src=3, len=4)]).spad
    assert [int(v) for v in got[100:102]] == reference_softmax([127, -128])
    assert int(got[110]) == 65536
    assert [int(v) for v in got[120:124]] == [16384] * 4


# ---------------------------------------------------------------- LD, ST, the machine
@SETTINGS
@given(st.data())
def test_ld_and_st_copy_words(data):
    n = data.draw(st.integers(1, 64))
    src, dst, back = (data.draw(st.integers(0, lim - n)) for lim in (EXT_WORDS, SPAD_WORDS, EXT_WORDS))
    ext = memory_from(data.draw(seeds), EXT_WORDS)
    m = Machine(ext).run([build("LD", dst=dst, src=src, len=n), build("ST", src=dst, dst=back, len=n), HALT])
    want = list(ext)
    want[back:back + n] = ext[src:src + n]
    assert [int(v) for v in m.spad[dst:dst + n]] == ext[src:src + n]
    assert [int(v) for v in m.ext] == want


def test_memories_sizes_copy_and_wrap():
    ext = [0xFFFFFFFF, 2 ** 31, 5]
    m = Machine(ext)
    assert m.ext.size == EXT_WORDS == 8192 and m.spad.size == SPAD_WORDS == 4096
    assert [int(v) for v in m.ext[:4]] == [-1, -2 ** 31, 5, 0]
    m.run([build("LD", dst=0, src=0, len=3), build("ST", src=0, dst=2, len=1), HALT])
    assert ext == [0xFFFFFFFF, 2 ** 31, 5]  # the caller's memory is never modified
    with pytest.raises(ValueError):
        Machine([0] * (EXT_WORDS + 1))


def test_counters_follow_the_cycle_model_and_add_up():
    program = [build("LD", dst=0, src=0, len=20), build("MM", dst=100, A=0, B=4, M=2, K=4, N=3, lda=4, ldb=3, ldc=3),
               build("RQ", dst=200, src=100, len=6, m=1 << 23, s=23), build("SM", dst=210, src=200, len=6),
               build("ST", src=210, dst=50, len=6), HALT]
    m = Machine(list(range(20))).run(program)
    assert m.counters == cycle_counts(program)
    assert (m.total, m.matrix, m.dma, m.vector, m.instructions) == tuple(cycle_counts(program))
    m.run(program)
    assert m.counters == cycle_counts(program) + cycle_counts(program)


def test_trace_sees_every_instruction():
    seen = []
    program = [build("LD", dst=0, src=0, len=1), build("ST", src=0, dst=9, len=1), HALT]
    Machine([7]).run(program, trace=lambda i, ins, m: seen.append((i, ins.op, int(m.ext[9]))))
    assert seen == [(0, "LD", 0), (1, "ST", 7), (2, "HALT", 7)]


def test_mm_with_overlapping_output_rows_writes_in_order():
    # ldc = 1 < N = 2: row 1 overwrites the second word of row 0.
    spad = [1, 2, 3, 4] + [0] * (SMALL - 4)   # A = [[1], [2]] (lda = 1), B' = [[3, 4]]
    got = run_small(spad, [build("MM", dst=50, A=0, B=2, M=2, K=1, N=2, lda=1, ldb=2, ldc=1)]).spad
    assert [int(v) for v in got[50:53]] == [3, 6, 8]


# ---------------------------------------------------------------- refused programs
LD_OK = build("LD", dst=0, src=0, len=4)
MM = dict(dst=0, A=0, B=0, M=1, K=1, N=1, tb=0, lda=1, ldb=1, ldc=1)
RQ = dict(dst=0, src=0, len=1, m=1, s=0, relu=0)

INVALID = {
    "unknown op": ([Instr("FOO", ()), HALT], 0, "op"),
    "not an instruction": (["LD dst=0 src=0 len=1", HALT], 0, "op"),
    "mapping without a field": ([{"op": "LD", "dst": 0, "src": 0}, HALT], 0, "len"),
    "mapping with a stray field": ([{"op": "SM", "dst": 0, "src": 0, "len": 1, "x": 1}, HALT], 0, "x"),
    "too few values": ([Instr("LD", (0, 0)), HALT], 0, "len"),
    "too many values": ([Instr("SM", (0, 0, 1, 1)), HALT], 0, "values"),
    "not an integer": ([LD_OK, Instr("LD", (1.5, 0, 1)), HALT], 1, "dst"),
    "negative": ([LD_OK, LD_OK, build("ST", src=0, dst=-1, len=1), HALT], 2, "dst"),
    "missing HALT": ([LD_OK], 1, "op"),
    "empty program": ([], 0, "op"),
    "HALT before the end": ([LD_OK, HALT, LD_OK, HALT], 1, "op"),
    "LD len 0": ([build("LD", dst=0, src=0, len=0), HALT], 0, "len"),
    "LD past SPAD": ([build("LD", dst=4090, src=0, len=7), HALT], 0, "dst"),
    "LD past EXT": ([build("LD", dst=0, src=8190, len=3), HALT], 0, "src"),
    "ST past SPAD": ([build("ST", src=4095, dst=0, len=2), HALT], 0, "src"),
    "ST past EXT": ([build("ST", src=0, dst=8192, len=1), HALT], 0, "dst"),
    "MM M = 0": ([build("MM", **{**MM, "M": 0}), HALT], 0, "M"),
    "MM M = 5": ([build("MM", **{**MM, "M": 5}), HALT], 0, "M"),
    "MM N = 5": ([build("MM", **{**MM, "N": 5}), HALT], 0, "N"),
    "MM K = 0": ([build("MM", **{**MM, "K": 0}), HALT], 0, "K"),
    "MM K = 65": ([build("MM", **{**MM, "K": 65}), HALT], 0, "K"),
    "MM tb = 2": ([build("MM", **{**MM, "tb": 2}), HALT], 0, "tb"),
    "MM A past SPAD": ([build("MM", **{**MM, "A": 4000, "M": 4, "lda": 32}), HALT], 0, "A"),
    "MM B past SPAD": ([build("MM", **{**MM, "B": 4000, "K": 4, "ldb": 32}), HALT], 0, "B"),
    "MM B' past SPAD": ([build("MM", **{**MM, "B": 4000, "N": 4, "tb": 1, "ldb": 32}), HALT], 0, "B"),
    "MM C past SPAD": ([build("MM", **{**MM, "dst": 4095, "N": 2}), HALT], 0, "dst"),
    "RQ m = 2^24": ([build("RQ", **{**RQ, "m": 2 ** 24}), HALT], 0, "m"),
    "RQ s = 64": ([build("RQ", **{**RQ, "s": 64}), HALT], 0, "s"),
    "RQ relu = 2": ([build("RQ", **{**RQ, "relu": 2}), HALT], 0, "relu"),
    "RQ len 0": ([build("RQ", **{**RQ, "len": 0}), HALT], 0, "len"),
    "RQ src past SPAD": ([build("RQ", **{**RQ, "src": 4000, "len": 100}), HALT], 0, "src"),
    "RQ dst past SPAD": ([build("RQ", **{**RQ, "dst": 4096}), HALT], 0, "dst"),
    "SM len 0": ([build("SM", dst=0, src=0, len=0), HALT], 0, "len"),
    "SM dst past SPAD": ([build("SM", dst=4095, src=0, len=2), HALT], 0, "dst"),
}


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_programs_are_refused_before_anything_runs(name):
    program, index, field = INVALID[name]
    ext = list(range(1, 101))
    m = Machine(ext)
    with pytest.raises(ProgramError) as info:
        m.run(program)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.index, err.field) == (index, field)
    assert f"instruction {index}" in str(err) and f"'{field}'" in str(err)
    # nothing ran: the memories and the counters are as they were
    assert [int(v) for v in m.ext[:100]] == ext and not m.spad.any() and m.total == 0


def test_program_error_names_the_op():
    with pytest.raises(ProgramError, match=r"instruction 0 \(MM\): field 'K'"):
        Machine().run([build("MM", **{**MM, "K": 65}), HALT])


def test_a_float_field_is_refused_even_after_the_same_int_instruction_was_accepted():
    Machine().run([Instr("LD", (1, 0, 1)), HALT])          # the int version is valid (and remembered)
    with pytest.raises(ProgramError) as info:
        Machine().run([Instr("LD", (1.0, 0, 1)), HALT])
    assert info.value.field == "dst"
