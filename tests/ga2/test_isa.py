"""ga2.isa: instructions as data, the text and binary forms, the cycle model."""
import copy
import pickle

import pytest
from hypothesis import given, settings, strategies as st

from ga2 import isa
from ga2.isa import FIELDS, Instr, assemble, build, cycle_counts, decode, disassemble, encode, wait_cycles

SETTINGS = settings(max_examples=150, derandomize=True, deadline=None, database=None)

PUBLISHED_LINE = "MM dst=2816 A=0 B=512 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4"


# ---------------------------------------------------------------- instructions as data
def test_build_orders_fields_and_fills_defaults():
    ins = build("MM", ldc=4, ldb=16, lda=16, N=4, K=16, M=1, B=512, A=0, dst=2816)
    assert ins.op == "MM"
    assert ins.values == (2816, 0, 512, 1, 16, 4, 0, 16, 16, 4)
    assert ins.fields == {"dst": 2816, "A": 0, "B": 512, "M": 1, "K": 16, "N": 4, "tb": 0,
                          "lda": 16, "ldb": 16, "ldc": 4}
    assert ins["K"] == 16 and ins.K == 16
    assert build("RQ", dst=1, src=2, len=3, m=4, s=5).relu == 0


@pytest.mark.parametrize("op, fields, field", [
    ("XX", {}, "op"),
    ("LD", {"dst": 0, "src": 0, "len": 1, "bogus": 3}, "bogus"),
    ("LD", {"dst": 0, "src": 0}, "len"),
    ("HALT", {"len": 1}, "len"),
])
def test_build_refuses_malformed_instructions(op, fields, field):
    with pytest.raises(isa.InstructionFormError) as info:
        build(op, **fields)
    assert info.value.field == field
    assert field in str(info.value)


def test_instr_is_plain_hashable_picklable_data():
    ins = build("SM", dst=1, src=2, len=3)
    assert ins == Instr("SM", (1, 2, 3))
    assert hash(ins) == hash(Instr("SM", (1, 2, 3)))
    assert pickle.loads(pickle.dumps(ins)) == ins
    assert copy.deepcopy(ins) == ins
    with pytest.raises(AttributeError):
        ins.bogus
    with pytest.raises(KeyError):
        ins["bogus"]


def test_op_reads_like_a_field_as_in_the_published_chapters_dict_instructions():
    """The published GA-2 chapter's code reads ``ins["op"]``; fields keep their names and unknown ones still fail."""
    ins = build("LD", dst=0, src=32, len=16)
    assert ins["op"] == "LD" and ins["len"] == 16
    assert build("HALT")["op"] == "HALT"
    per = {}
    for item in (ins, build("ST", src=1824, dst=2080, len=16), build("HALT")):
        if item["op"] != "HALT":
            per[item["op"]] = 2 + wait_cycles(item)
    assert per == {"LD": 27, "ST": 20}


def test_numpy_integers_become_ints():
    import numpy as np
    ins = build("LD", dst=np.int64(3), src=np.int32(4), len=np.uint16(5))
    assert all(type(v) is int for v in ins.values)


def test_mapping_instructions_are_accepted():
    assert isa.as_instr({"op": "ST", "src": 1, "dst": 2, "len": 3}) == build("ST", src=1, dst=2, len=3)


# ---------------------------------------------------------------- text form
def test_disassemble_matches_the_seed_listing_format():
    ins = build("MM", dst=2816, A=0, B=512, M=1, K=16, N=4, tb=0, lda=16, ldb=16, ldc=4)
    assert disassemble(ins) == PUBLISHED_LINE
    assert str(ins) == PUBLISHED_LINE
    assert disassemble(build("HALT")) == "HALT"
    assert disassemble(build("RQ", dst=2832, src=2816, len=16, m=14805262, s=31)) == \
        "RQ dst=2832 src=2816 len=16 m=14805262 s=31 relu=0"


def test_assemble_reads_listing_lines():
    assert assemble(PUBLISHED_LINE) == build("MM", dst=2816, A=0, B=512, M=1, K=16, N=4, tb=0, lda=16, ldb=16, ldc=4)
    assert assemble(" 31 HALT") == build("HALT")
    assert assemble("LD dst=0 src=32 len=16   # the new token") == build("LD", dst=0, src=32, len=16)
    assert assemble("rq dst=1 src=2 len=3 m=0x10 s=4") == build("RQ", dst=1, src=2, len=3, m=16, s=4)
    text = "0 LD dst=0 src=32 len=16\n\n# comment\n1 HALT\n"
    assert isa.parse_listing(text) == [build("LD", dst=0, src=32, len=16), build("HALT")]


def test_programs_are_lines_both_ways():
    program = [build("LD", dst=0, src=32, len=16), assemble(PUBLISHED_LINE), build("HALT")]
    text = disassemble(program)
    assert text.splitlines()[1] == PUBLISHED_LINE and text.splitlines()[2] == "HALT"
    assert assemble(text) == program
    assert assemble(isa.format_listing(program)) == program   # numbered lines too


@pytest.mark.parametrize("line", ["", "FOO dst=1", "LD dst=1 src=2", "LD dst=1 src=2 len=x", "LD dst src=1 len=2",
                                  "LD dst=1 dst=1 src=2 len=3", "HALT len=2"])
def test_assemble_refuses_bad_lines(line):
    with pytest.raises(isa.AssemblyError):
        assemble(line)


# ---------------------------------------------------------------- random valid instructions
addr = st.integers(0, 4095)
length = st.integers(1, 4096)


def instructions():
    return st.one_of(
        st.builds(lambda d, s, n: build("LD", dst=d, src=s, len=n), addr, st.integers(0, 8191), length),
        st.builds(lambda s, d, n: build("ST", src=s, dst=d, len=n), addr, st.integers(0, 8191), length),
        st.builds(lambda d, s, n: build("SM", dst=d, src=s, len=n), addr, addr, length),
        st.builds(lambda d, s, n, m, sh, r: build("RQ", dst=d, src=s, len=n, m=m, s=sh, relu=r),
                  addr, addr, length, st.integers(0, 2 ** 24 - 1), st.integers(0, 63), st.integers(0, 1)),
        st.builds(lambda d, a, b, M, K, N, tb, lda, ldb, ldc: build(
            "MM", dst=d, A=a, B=b, M=M, K=K, N=N, tb=tb, lda=lda, ldb=ldb, ldc=ldc),
            addr, addr, addr, st.integers(1, 4), st.integers(1, 64), st.integers(1, 4), st.integers(0, 1),
            addr, addr, addr),
        st.just(build("HALT")),
    )


@SETTINGS
@given(instructions())
def test_text_round_trip(ins):
    assert assemble(disassemble(ins)) == ins


@SETTINGS
@given(st.lists(instructions(), max_size=12))
def test_binary_round_trip(program):
    words = encode(program)
    assert all(0 <= w < 2 ** 32 for w in words)
    assert decode(words) == program


def test_encoding_sizes_and_a_known_word():
    assert encode([build("HALT")]) == [0]
    assert len(encode([build("LD", dst=0, src=0, len=1)])) == 2
    assert len(encode([build("RQ", dst=0, src=0, len=1, m=1, s=1)])) == 3
    assert len(encode([assemble(PUBLISHED_LINE)])) == 4
    # MM: opcode 3, M=1 at bit 24, N=4 at bit 21, K=16 at bit 14; dst|A; B|lda; ldb|ldc
    assert encode([assemble(PUBLISHED_LINE)]) == [(3 << 28) | (1 << 24) | (4 << 21) | (16 << 14),
                                            (2816 << 16) | 0, (512 << 16) | 16, (16 << 16) | 4]


@pytest.mark.parametrize("ins, field", [
    (Instr("LD", (70000, 0, 1)), "dst"),
    (Instr("RQ", (0, 0, 1, 2 ** 24, 3, 0)), "m"),
    (Instr("RQ", (0, 0, 1, 5, 64, 0)), "s"),
    (Instr("MM", (0, 0, 0, 8, 1, 1, 0, 1, 1, 1)), "M"),
    (Instr("SM", (0, -1, 1)), "src"),
])
def test_encode_refuses_fields_that_do_not_fit(ins, field):
    with pytest.raises(isa.EncodingError, match=f"'{field}'"):
        encode([ins])


@pytest.mark.parametrize("words", [[0xF0000000], [1 << 28], [(1 << 28) | (1 << 20), 0], [0x10000000 | 5, 0, 7]])
def test_decode_refuses_words_that_are_not_instructions(words):
    # unknown opcode; LD cut short; LD with bits outside its layout; a stray trailing word
    with pytest.raises(isa.EncodingError):
        decode(words)


# ---------------------------------------------------------------- the cycle model (spec table)
@pytest.mark.parametrize("ins, wait", [
    (build("LD", dst=0, src=0, len=768), 768 + 9),
    (build("ST", src=0, dst=0, len=16), 16 + 2),
    (build("RQ", dst=0, src=0, len=3, m=1, s=1), 3 + 2),
    (build("SM", dst=0, src=0, len=32), 3 * 32 + 47),
    (build("MM", dst=0, A=0, B=0, M=1, K=16, N=4, lda=16, ldb=16, ldc=4), 16 + 64 + 4 + 1 + 16 + 4 + 5),
    (build("MM", dst=0, A=0, B=0, M=4, K=16, N=4, lda=16, ldb=16, ldc=16), 64 + 64 + 16 + 4 + 16 + 4 + 5),
    (build("HALT"), 0),
])
def test_wait_cycles_follow_the_spec_table(ins, wait):
    assert wait_cycles(ins) == wait
    assert isa.instruction_cycles(ins) == wait + 2


def test_cycle_counts_sort_waits_into_counters():
    program = [build("LD", dst=0, src=0, len=10), build("ST", src=0, dst=0, len=4),
               build("MM", dst=0, A=0, B=0, M=2, K=3, N=4, lda=3, ldb=4, ldc=4),
               build("RQ", dst=0, src=0, len=5, m=1, s=1), build("SM", dst=0, src=0, len=2), build("HALT")]
    counts = cycle_counts(program)
    # waits: LD 10+9, ST 4+2, MM 2*3+3*4+2*4+2+3+4+5 = 40, RQ 5+2, SM 3*2+47; 6 issues of 2 cycles
    assert counts == isa.CycleCounts(total=19 + 6 + 40 + 7 + 53 + 2 * 6, matrix=40, dma=19 + 6, vector=7 + 53,
                                     instructions=5)
    assert counts.total == counts.matrix + counts.dma + counts.vector + 2 * 6  # every issue, HALT's included
    assert counts + counts == isa.CycleCounts(*(2 * c for c in counts))


def test_every_op_has_fields_a_layout_and_a_cycle_rule():
    assert set(FIELDS) == set(isa.OPCODES) == set(isa.UNIT) == {"LD", "ST", "MM", "RQ", "SM", "HALT"}
