"""The benchmark's yardstick: the naive interpreter computes what the machine computes."""
import numpy as np

from bench import bench_ga2
from bench.naive_ga2 import NaiveMachine
from ga2 import attn, checks


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
