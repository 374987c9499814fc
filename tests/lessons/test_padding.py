"""lessons.padding: the padded prefill's cost in words, on made-up times, both ways round."""
import pytest

from lessons.padding import padding_cost_sentence


def test_a_time_ratio_within_5_percent_of_the_token_ratio_is_as_predicted():
    # 30 ms against 20 ms: 1.5 times slower, for 1.48 times the tokens (1.5 / 1.48 = 1.014)
    assert padding_cost_sentence(0.030, 0.020, 1.48) == (
        "the padded prefill took 30 ms against 20 ms packed, 1.5 times slower than it, as the token count predicts")


def test_a_time_ratio_above_the_token_ratio_is_blamed_on_attention():
    # 40 ms against 10 ms: 4 times slower, for 2 times the tokens
    assert padding_cost_sentence(0.040, 0.010, 2.0) == (
        "the padded prefill took 40 ms against 10 ms packed, 4.0 times slower than it: more than the token "
        "count alone predicts, since attention grows with the square of a prompt's length, and the padded "
        "prompts are all the longest")


def test_a_time_ratio_below_the_token_ratio_is_the_packed_prefills_own_cost():
    # 15 ms against 12 ms: 1.25 times slower, for 2 times the tokens
    assert padding_cost_sentence(0.015, 0.012, 2.0) == (
        "the padded prefill took 15 ms against 12 ms packed, 1.2 times slower than it: less than the token "
        "count alone predicts, since the packed prefill runs each prompt's attention on its own, a cost "
        "padding does not add to")


def test_a_padded_prefill_measured_faster_says_so():
    # a busy machine: 10 ms padded against 30 ms packed, 3 times faster, for 1.2 times the tokens
    said = padding_cost_sentence(0.010, 0.030, 1.2)
    assert said.startswith("the padded prefill took 10 ms against 30 ms packed, 3.0 times faster than it: less than")


def test_the_edges_of_agreement():
    # 1.04 and 0.96 times the token ratio are as predicted; 1.06 times is more, 0.94 times less
    assert padding_cost_sentence(0.0104, 0.005, 2.0).endswith("as the token count predicts")
    assert padding_cost_sentence(0.0096, 0.005, 2.0).endswith("as the token count predicts")
    assert ": more than" in padding_cost_sentence(0.0106, 0.005, 2.0)
    assert ": less than" in padding_cost_sentence(0.0094, 0.005, 2.0)


@pytest.mark.parametrize("args", [(0, 0.01, 1.5), (0.01, -1, 1.5), (0.01, 0.01, 0)])
def test_non_positive_figures_are_refused(args):
    with pytest.raises(ValueError, match="must be positive"):
        padding_cost_sentence(*args)
