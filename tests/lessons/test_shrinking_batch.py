"""lessons.shrinking_batch: a decode step's time as sequences leave, in words, on made-up times."""
import pytest

from lessons.shrinking_batch import shrinking_batch_sentence


def test_the_time_falls_more_slowly_than_the_flops():
    # 6 sequences 12 ms, one 6 ms: 50% of the time for 20% of the FLOPs
    assert shrinking_batch_sentence(6, 0.012, 0.006, 0.20) == (
        "A step of 6 sequences took 12.00 ms here, a step of one 6.00 ms: 50% of the time for 20% of the "
        "FLOPs. The time falls more slowly than the FLOPs")


def test_the_time_falls_about_as_fast_as_the_flops():
    # 10 ms and 2.1 ms: 21% of the time for 20% of the FLOPs (21 / 20 = 1.05)
    assert shrinking_batch_sentence(6, 0.010, 0.0021, 0.20).endswith(
        "21% of the time for 20% of the FLOPs. The time falls about as fast as the FLOPs")


def test_a_time_falling_faster_than_the_flops_is_a_disturbed_measurement():
    # 10 ms and 1 ms: 10% of the time for 20% of the FLOPs
    assert shrinking_batch_sentence(4, 0.010, 0.001, 0.20) == (
        "A step of 4 sequences took 10.00 ms here, a step of one 1.00 ms: 10% of the time for 20% of the "
        "FLOPs. The time falls faster than the FLOPs (a measurement disturbed by other programs on this machine)")


def test_the_edges_of_agreement():
    assert shrinking_batch_sentence(2, 1.0, 0.95, 1.0).endswith("about as fast as the FLOPs")     # 0.95
    assert shrinking_batch_sentence(2, 1.0, 0.94, 1.0).endswith("(a measurement disturbed by other programs on this machine)")
    assert shrinking_batch_sentence(2, 1.0, 0.525, 0.5).endswith("about as fast as the FLOPs")    # 1.05
    assert shrinking_batch_sentence(2, 1.0, 0.53, 0.5).endswith("more slowly than the FLOPs")


@pytest.mark.parametrize("args", [(6, 0, 0.01, 0.2), (6, 0.01, 0, 0.2), (6, 0.01, 0.01, 0)])
def test_non_positive_figures_are_refused(args):
    with pytest.raises(ValueError, match="must be positive"):
        shrinking_batch_sentence(*args)
