"""lessons.batching_wait: what a batching window bought, in words, on made-up rates."""
import pytest

from lessons.batching_wait import FirstTokenSteps, window_gain_sentence

START = "Measured on the machine that built this page, the tokens per second of running time at the higher rate"


def test_a_gain_below_the_fill_is_a_step_time_that_grows_with_the_batch():
    # 1,000 tokens/s without waiting, 1,500 with: 1.5 times, for 3 times the tokens per step
    assert window_gain_sentence(1000, 1500, 3.0) == (
        f"{START} went from 1000 without waiting to 1500 with a 32-step window, 1.50 times as many, against "
        "3.00 times as many tokens per step: less than the fuller steps promise, because on this small model "
        "a step's time grows with its batch, while a 7B model's step on a GPU is set by reading its weights")


def test_a_gain_as_large_as_the_fill_costs_hardly_more_time_a_step():
    # 200 to 600 tokens/s: 3 times, for 2.5 times the tokens per step
    assert window_gain_sentence(200, 600, 2.5, window=8) == (
        f"{START} went from 200 without waiting to 600 with a 8-step window, 3.00 times as many, against "
        "2.50 times as many tokens per step: the fuller steps cost hardly more time each")


def test_a_gain_equal_to_the_fill_is_not_less():
    assert window_gain_sentence(100, 200, 2.0).endswith("the fuller steps cost hardly more time each")


@pytest.mark.parametrize("args", [(0, 1, 1), (1, 0, 1), (1, 1, -2)])
def test_non_positive_figures_are_refused(args):
    with pytest.raises(ValueError, match="must be positive"):
        window_gain_sentence(*args)


def test_first_token_steps_keeps_each_requests_first_step():
    from types import SimpleNamespace
    first = FirstTokenSteps()
    for step, rows in ((0, [0]), (1, [0, 1]), (2, [0, 1, 2]), (3, [2])):
        first(SimpleNamespace(step=step), rows, [7] * len(rows), None)
    assert first.steps == {0: 0, 1: 1, 2: 2}


def test_first_token_steps_from_a_served_run():
    """Two requests of 3 tokens arriving at steps 0 and 5 on a small random model: each makes its
    first token in the step it arrives (nothing else is running)."""
    from kvcache.model import Model
    from kvcache.serving import Request, serve
    model = Model.random(dict(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                              num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32), 0)
    first = FirstTokenSteps()
    serve(model, [Request([1, 2, 3], 3, arrival=0), Request([4, 5], 3, arrival=5)], on_step=first)
    assert first.steps == {0: 0, 1: 5}
