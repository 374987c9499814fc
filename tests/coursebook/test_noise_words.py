"""Words for times measured on a shared machine: a difference inside the noise is called noise,
and each sentence is tested with made-up numbers on both sides of the band."""
import pytest

from coursebook import (NOISE, against_its_prediction, change_words, noise_times_word, quotient_gap,
                        where_the_gap_is,
                        within_noise)


def test_the_noise_band_is_fifteen_percent_either_way():
    assert NOISE == 0.15
    assert within_noise(1.0) and within_noise(1.15) and within_noise(1 / 1.15)
    assert within_noise(0.95) and within_noise(1.05)
    assert not within_noise(1.16) and not within_noise(0.86)
    with pytest.raises(ValueError):
        within_noise(0.0)


def test_a_ratio_inside_the_noise_is_called_noise_and_one_outside_a_speed():
    # split-K over main memory: 89.4 ms one pass, 85.0 ms split -> a ratio of 89.4 / 85.0 = 1.05
    assert noise_times_word(89.4 / 85.0) == "no faster or slower, within the noise (a ratio of 1.05), than"
    # the other way: one pass 85.0 ms, split-K 89.4 ms -> 0.95, noise too (not "1.1 times slower")
    assert noise_times_word(85.0 / 89.4) == "no faster or slower, within the noise (a ratio of 0.95), than"
    assert noise_times_word(1.9) == "1.9 times faster than"
    assert noise_times_word(0.5) == "2.0 times slower than"
    assert noise_times_word(1.3, noise=0.5).startswith("no faster or slower")


def test_a_time_that_moves_is_said_to_move_and_one_that_does_not_hardly_moved():
    assert change_words(2.178, 1.542) == "fell by 29%"       # the whole-buffer loop, 1/64 to all
    assert change_words(26.9, 37.6) == "rose by 40%"
    assert change_words(2.0, 1.94) == "hardly moved (3% lower)"
    assert change_words(2.0, 2.1) == "hardly moved (5% higher)"
    with pytest.raises(ValueError):
        change_words(0.0, 1.0)


def test_a_time_against_its_prediction_both_ways():
    assert against_its_prediction(0.566, 0.546) == "on time (4% over its prediction)"
    assert against_its_prediction(0.520, 0.546) == "on time (5% under its prediction)"
    assert against_its_prediction(1.107, 0.71) == "1.6 times its prediction"
    assert against_its_prediction(0.30, 0.71) == "0.4 times its prediction"


@pytest.mark.parametrize("recompute,cached,words", [
    ((0.566, 0.546), (1.107e-3, 0.71e-3), "the gap is in the cached step"),
    ((0.900, 0.546), (0.72e-3, 0.71e-3), "the gap is in the recomputation"),
    ((0.900, 0.546), (1.107e-3, 0.71e-3), "the gap is in both the recomputation and the cached step"),
    ((0.566, 0.546), (0.73e-3, 0.71e-3),
     "neither departs from its prediction beyond the noise: the gap is noise"),
])
def test_where_the_gap_between_two_ratios_lies_in_every_case(recompute, cached, words):
    assert where_the_gap_is({"the recomputation": recompute, "the cached step": cached}) == words


def test_where_the_gap_is_needs_times():
    with pytest.raises(ValueError):
        where_the_gap_is({})


REC, CACHED = "the recomputation", "the cached step"


@pytest.mark.parametrize("recompute,cached,words", [
    # the figures: recomputation on time, the cached step 1.107 ms for 0.71 predicted
    ((0.566, 0.546), (1.107e-3, 0.71e-3),
     "the measured speedup is 0.66 times the predicted one: the gap is in the cached step"),
    # both steps 0.7 times their predictions: they cancel in the quotient
    ((0.218, 0.305), (0.650e-3, 0.925e-3), "the measured speedup is the predicted one, within the noise"),
    # the recomputation slow, the cached step on time: the speedup above its prediction
    ((0.900, 0.546), (0.72e-3, 0.71e-3),
     "the measured speedup is 1.63 times the predicted one: the gap is in the recomputation"),
    # each within the noise, together outside it
    ((0.546 * 1.12, 0.546), (0.71e-3 / 1.12, 0.71e-3),
     "the measured speedup is 1.25 times the predicted one, though neither step alone departs from its "
     "prediction beyond the noise"),
])
def test_a_quotient_against_its_prediction_names_the_step_that_departs(recompute, cached, words):
    assert quotient_gap((REC, *recompute), (CACHED, *cached)) == words


def test_a_quotient_of_times_needs_positive_times():
    with pytest.raises(ValueError):
        quotient_gap((REC, 0.0, 1.0), (CACHED, 1.0, 1.0))
