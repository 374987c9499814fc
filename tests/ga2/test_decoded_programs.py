"""ga2.machine's table of decoded instructions: a run from the table is the run from scratch.

Every instruction is checked, priced and decoded once and then found in a table keyed by the
instruction itself.  These tests run programs twice (from an empty table, then from a full
one), change programs between runs, mix instructions the table must not serve, and compare
with the per-word interpreter of the benchmark (``bench.naive_ga2``, written independently of
the machine's numpy units) and with values worked out by hand.
"""
import numpy as np
import pytest

from bench.naive_ga2 import NaiveMachine
from ga2 import machine as machine_module
from ga2.isa import Instr, ProgramError, build, cycle_counts
from ga2.machine import DECODED_CACHE_ENTRIES, Machine, decode, to_words
from ga2.rtl.fuzz import random_cases

HALT = build("HALT")


@pytest.fixture
def empty_table():
    """The machine's table emptied before the test, and again after it (other tests start afresh)."""
    machine_module._decoded.clear()
    yield machine_module._decoded
    machine_module._decoded.clear()


def table_size() -> int:
    return sum(len(table) for table in machine_module._decoded.values())


def final_state(m) -> tuple:
    return [int(v) for v in m.ext], [int(v) for v in m.spad], tuple(m.counters)


def test_runs_from_the_table_equal_runs_from_an_empty_one_and_the_naive_interpreter(empty_table):
    cases = random_cases(150, seed=31)
    for case in cases:
        naive = NaiveMachine(case.ext, case.spad).run(case.program)
        cold = Machine(case.ext, case.spad).run(case.program)       # decoded now
        warm = Machine(case.ext, case.spad).run(case.program)       # from the table
        want = ([int(v) for v in naive.ext], [int(v) for v in naive.spad], tuple(naive.counters))
        assert final_state(cold) == want, case.label
        assert final_state(warm) == want, case.label
    assert table_size() > 0


def test_a_program_changed_after_a_run_runs_what_it_holds_now(empty_table):
    ext = list(range(100, 200))
    program = [build("LD", dst=0, src=0, len=4), HALT]
    first = Machine(ext).run(program)
    assert [int(v) for v in first.spad[:6]] == [100, 101, 102, 103, 0, 0]
    program[0] = build("LD", dst=0, src=10, len=6)         # the list changed in place
    second = Machine(ext).run(program)
    assert [int(v) for v in second.spad[:7]] == [110, 111, 112, 113, 114, 115, 0]
    assert second.counters.dma == 6 + 9 and second.counters.total == 2 + 15 + 2
    program.insert(0, build("LD", dst=20, src=50, len=1))  # and grew
    third = Machine(ext).run(program)
    assert int(third.spad[20]) == 150 and third.counters.instructions == 2


def test_an_error_is_raised_at_the_same_instruction_with_the_table_full(empty_table):
    ld, mm = build("LD", dst=0, src=0, len=4), build("MM", dst=8, A=0, B=0, M=1, K=4, N=1, lda=4, ldb=1, ldc=1)
    Machine().run([ld, mm, HALT])                            # all three are in the table now
    cases = {
        "a bad instruction after good ones": ([ld, mm, build("LD", dst=4095, src=0, len=2), HALT], 2, "dst"),
        "HALT before the end": ([ld, HALT, mm, HALT], 1, "op"),
        "a missing HALT": ([ld, mm], 2, "op"),
        "a float field equal to a known int": ([ld, Instr("LD", (0.0, 0, 4)), HALT], 1, "dst"),
        "an unknown op": ([mm, Instr("NOP", ()), HALT], 1, "op"),
        "a mapping with a stray field": ([ld, {"op": "LD", "dst": 0, "src": 0, "len": 4, "x": 1}, HALT], 1, "x"),
    }
    for name, (program, index, field) in cases.items():
        m = Machine(list(range(1, 9)))
        with pytest.raises(ProgramError) as info:
            m.run(program)
        assert (info.value.index, info.value.field) == (index, field), name
        assert not m.spad.any() and m.total == 0, name      # nothing ran


def test_an_instruction_in_the_table_of_a_large_memory_is_checked_again_for_a_small_one(empty_table):
    ld = build("LD", dst=200, src=0, len=8)
    Machine().run([ld, HALT])
    small = Machine(spad_words=100)
    with pytest.raises(ProgramError) as info:
        small.run([ld, HALT])
    assert (info.value.index, info.value.field) == (0, "dst") and "past its end (100 words)" in str(info.value)
    assert Machine(list(range(8))).run([ld, HALT]).spad[200:208].tolist() == list(range(8))   # still right there


def test_instructions_the_table_does_not_keep_still_run_as_their_int_twins(empty_table):
    ext = list(range(30))
    plain = Machine(ext).run([build("LD", dst=0, src=3, len=5), HALT])
    numpy_fields = Machine(ext).run([Instr("LD", (np.int64(0), np.int64(3), np.int64(5))), HALT])
    as_mapping = Machine(ext).run([{"op": "LD", "dst": 0, "src": 3, "len": 5}, HALT])
    for m in (plain, numpy_fields, as_mapping):
        assert m.spad[:6].tolist() == [3, 4, 5, 6, 7, 0] and tuple(m.counters) == (2 + 14 + 2, 0, 14, 0, 1)
    assert all(type(v) is int for table in empty_table.values() for ins in table for v in ins.values)


def test_the_table_is_bounded_and_keeps_working_past_its_bound(empty_table):
    count = DECODED_CACHE_ENTRIES + 300
    ext = list(range(count + 10))
    for start in range(0, count, 50):                        # distinct instructions: LD of one word each
        program = [build("LD", dst=k % 4096, src=k, len=1) for k in range(start, min(start + 50, count))]
        m = Machine(ext, ext_words=count + 10).run(program + [HALT])
        assert all(int(m.spad[k % 4096]) == k for k in range(start, min(start + 50, count)))
        assert 0 < table_size() <= DECODED_CACHE_ENTRIES


def test_the_trace_sees_the_programs_own_instructions_in_order(empty_table):
    program = [build("LD", dst=0, src=0, len=2), build("ST", src=0, dst=5, len=2), HALT]
    Machine().run(program)
    seen = []
    Machine([4, 9]).run(program, trace=lambda i, ins, m: seen.append((i, ins, int(m.ext[6]))))
    assert [(i, ins) for i, ins, _ in seen] == list(enumerate(program))
    assert all(ins is mine for (_, ins, _), mine in zip(seen, program))
    assert [value for _, _, value in seen] == [0, 9, 9]


def test_decode_prices_a_program_as_the_cycle_model_does(empty_table):
    for case in random_cases(40, seed=5):
        assert decode(case.program).counts == cycle_counts(case.program)
        assert decode(case.program).counts == cycle_counts(case.program)      # from the table


def test_the_decoded_offsets_cannot_be_written():
    mm = build("MM", dst=64, A=0, B=16, M=2, K=3, N=2, tb=1, lda=4, ldb=5, ldc=2)
    (_, (a, b, c)), _ = decode([mm, HALT]).steps
    for offsets in (a, b, c):
        with pytest.raises(ValueError):
            offsets[0, 0] = 0


def test_words_from_an_int32_array_are_copied_and_other_values_taken_mod_2_32():
    source = np.array([1, -2, 2 ** 31 - 1], dtype=np.int32)
    memory = to_words(source, 5)
    source[0] = 99
    assert memory.tolist() == [1, -2, 2 ** 31 - 1, 0, 0] and memory.dtype == np.int32
    assert to_words([2 ** 32 + 5, -1, 2 ** 31], 3).tolist() == [5, -1, -2 ** 31]
    assert to_words(np.array([[1, 2], [3, 4]], dtype=np.int32), 4).tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="3 initial words do not fit a memory of 2 words"):
        to_words(source, 2)
