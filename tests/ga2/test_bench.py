"""The benchmark's yardstick: the naive interpreter computes what the machine computes."""
import numpy as np

from bench import bench_ga2
from bench.naive_ga2 import NaiveMachine
from ga2 import attn, checks
from ga2.machine import Machine


def test_naive_interpreter_agrees_with_the_machine_on_whole_decode_loops():
    example = attn.make_example(6, 11)
    for fast, slow in zip(attn.sequence(example), attn.sequence(example, machine=NaiveMachine)):
        for variant in attn.VARIANTS:
            assert fast[variant].output == slow[variant].output
            assert fast[variant].counters == slow[variant].counters
        assert np.array_equal(fast.spad, np.array(slow.spad))


def test_the_checks_run_on_the_naive_interpreter():
    worst, problems = checks.check_pipeline(bench_ga2._naive_builder(), seeds=range(1), Ls=(5,), exact=True,
                                            stagewise=True)
    assert problems == [] and worst > 0
    assert callable(bench_ga2.main)


def test_the_benchmarks_decode_loop_is_the_spec_s_and_runs_alike_from_an_empty_and_a_full_table():
    loop = bench_ga2.decode_loop_programs(L=32)
    assert len(loop) == 64
    runs = []
    for cold in (True, False):
        if cold:
            bench_ga2._empty_tables()
        runs.append([Machine(ext).run(program) for program, ext in loop])
    last_cached, last_recompute = runs[0][-2], runs[0][-1]
    # the spec's 32-token rows: cached 38 instructions (HALT not counted) and 5251 cycles, recompute 90 and 15989
    assert (last_cached.instructions, last_cached.total) == (38, 5251)
    assert (last_recompute.instructions, last_recompute.total) == (90, 15989)
    for a, b in zip(*runs):
        assert np.array_equal(a.ext, b.ext) and np.array_equal(a.spad, b.spad) and a.counters == b.counters
