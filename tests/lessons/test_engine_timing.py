"""lessons.engine_timing: what chapters 5 and 7 measure, planned for machines this test does not
run on (slow and fast, little and much free memory, memory Linux does not report), and the
counts the plans rest on.  No speed is asserted: the calibrations here are made up, and the
measurements are checked for their form only."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lessons import engine_timing as et
from kvcache.config import ModelConfig
from kvcache.cost import flops_recompute_step, layer_products
from lessons.machine_facts import MachineFacts
from lessons.memory import GIB, MIB
from kvcache.model import Model

CONFIG = {"vocab_size": 1024, "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096}
CFG = ModelConfig.from_dict(CONFIG)

SPEEDS = {  # products FLOP/s, seconds per score, fixed seconds per step
    "a slow, busy machine": et.Calibration(2e8, 5e-7, 5e-3),
    "this kind of machine": et.Calibration(5e10, 1.5e-8, 4e-4),
    "a fast machine": et.Calibration(1e12, 1e-10, 2e-5),
}
MEMORY = {"unknown": MachineFacts(), "256 MiB free": MachineFacts(mem_available_bytes=256 * MIB),
          "200 GiB free": MachineFacts(mem_available_bytes=200 * GIB, logical_cpus=64, usable_cpus=64),
          "a cgroup with 64 MiB left": MachineFacts(mem_available_bytes=200 * GIB, cgroup_limit_bytes=GIB,
                                                    cgroup_used_bytes=GIB - 64 * MIB)}
CASES = [pytest.param(MEMORY[m], SPEEDS[s], id=f"{m}, {s}") for m, s in itertools.product(MEMORY, SPEEDS)]


def test_score_count_matches_a_count_of_the_blocks_by_hand():
    # n <= 128: one block of n queries over n keys, per layer and head
    assert et.score_count(CFG, 100) == 4 * 4 * 100 * 100
    # 700 tokens: five blocks of 128 queries over 128, 256, ... 640 keys, then 60 queries over 700
    assert et.score_count(CFG, 700) == 4 * 4 * (128 * (128 + 256 + 384 + 512 + 640) + 60 * 700)
    # one new token after 99 cached: 100 scores
    assert et.score_count(CFG, 1, 99) == 4 * 4 * 100


def test_product_flops_is_the_cost_count_without_attention():
    for n in (1, 17, 300):
        attention = CFG.num_hidden_layers * 4 * CFG.q_width * n * (n + 1) // 2
        assert et.product_flops(CFG, n) == flops_recompute_step(CFG, n) - attention
    assert et.product_flops(CFG, 1) == 4 * layer_products(CFG) + 2 * 128 * 1024


def test_the_calibration_predicts_from_its_three_numbers():
    cal = et.Calibration(1e9, 1e-8, 1e-3)
    assert cal.forward_seconds(CFG, 10) == pytest.approx(et.product_flops(CFG, 10) / 1e9
                                                         + et.score_count(CFG, 10) * 1e-8)
    # a step of two rows at contexts 5 and 7: the fixed cost once, every row's products and scores
    flops = 4 * 2 * layer_products(CFG) + 2 * 2 * 128 * 1024
    assert cal.step_seconds_at(CFG, [5, 7]) == pytest.approx(1e-3 + flops / 1e9 + 4 * 4 * 12 * 1e-8)
    assert cal.sentence() == "products 1.0 GFLOP/s, 10.00 ns per score, 1.00 ms fixed per step"
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="calibration"):
            et.Calibration(bad, 1e-8, 1e-3)


@pytest.mark.parametrize("facts,cal", CASES)
def test_the_batch_plan_is_bounded_on_any_machine(facts, cal):
    plan = et.plan_batch(facts, cal, CFG)
    assert plan.batch == 8 and plan.new_tokens == 48 and plan.max_len == plan.longest + 48
    assert plan.longest in et.LONGEST_PROMPTS
    assert 1 <= min(plan.prompt_lengths) <= plan.longest
    if plan.fits:
        assert plan.predicted_seconds <= plan.budget_seconds and plan.memory_bytes <= plan.memory_limit
        assert "the longest whose runs are predicted" in plan.reason
        # the next longer candidate would not have fitted
        longer = [n for n in et.LONGEST_PROMPTS if n > plan.longest]
        if longer:
            lengths = et.batch_lengths(min(longer))
            assert (et.batch_seconds(cal, CFG, lengths, 48, plan.repeats) > plan.budget_seconds
                    or et.batch_memory(CFG, min(longer)) > plan.memory_limit)
    else:
        assert plan.longest == min(et.LONGEST_PROMPTS) and "slow or busy" in plan.reason
    assert plan.predicted_seconds == pytest.approx(
        et.batch_seconds(cal, CFG, plan.prompt_lengths, plan.new_tokens, plan.repeats))
    assert plan.memory_bytes == et.batch_memory(CFG, plan.longest)


def test_the_batch_plan_follows_the_machine():
    slow = et.plan_batch(MEMORY["200 GiB free"], SPEEDS["a slow, busy machine"], CFG)
    fast = et.plan_batch(MEMORY["200 GiB free"], SPEEDS["a fast machine"], CFG)
    tight = et.plan_batch(MEMORY["a cgroup with 64 MiB left"], SPEEDS["a fast machine"], CFG)
    assert slow.longest < fast.longest == max(et.LONGEST_PROMPTS)
    assert tight.longest < fast.longest and tight.memory_bytes <= 8 * MIB
    assert "8 MiB" not in tight.reason and "64 MiB free" in tight.reason
    unknown = et.plan_batch(MachineFacts(), SPEEDS["a fast machine"], CFG)
    assert "assumed free (Linux did not say)" in unknown.reason
    # a model whose context is short: every prompt and the new tokens still fit in it
    short = et.plan_batch(MEMORY["200 GiB free"], SPEEDS["a fast machine"], {**CONFIG, "max_position_embeddings": 100})
    assert short.max_len <= 100


def test_batch_lengths_spread_from_an_eighth_to_the_longest():
    lengths = et.batch_lengths(512)
    assert sorted(lengths) == [64, 128, 192, 256, 320, 384, 448, 512]
    assert lengths != tuple(sorted(lengths)) and et.batch_lengths(512) == lengths      # shuffled, fixed


@pytest.mark.parametrize("facts,cal", CASES)
def test_the_context_plan_is_bounded_on_any_machine(facts, cal):
    plan = et.plan_contexts(facts, cal, CFG)
    n = plan.contexts
    assert n[0] == 16 and all(b == 2 * a for a, b in zip(n, n[1:])) and len(n) >= 3
    assert plan.largest <= 4096
    total = sum(et.context_seconds(cal, CFG, k, plan.repeats) for k in n)
    assert plan.predicted_seconds == pytest.approx(total)
    if len(n) > 3:        # beyond the three always measured, within the budget and the memory
        assert plan.predicted_seconds <= plan.budget_seconds and plan.memory_bytes <= plan.memory_limit
    if plan.largest < 4096:
        assert "would" in plan.reason
    else:
        assert "the most this chapter measures" in plan.reason


def test_the_context_plan_follows_the_machine():
    slow = et.plan_contexts(MEMORY["200 GiB free"], SPEEDS["a slow, busy machine"], CFG)
    fast = et.plan_contexts(MEMORY["200 GiB free"], SPEEDS["a fast machine"], CFG)
    assert slow.contexts == (16, 32, 64) and fast.largest == 4096
    assert "past 6 s" in slow.reason
    small = et.plan_contexts(MEMORY["a cgroup with 64 MiB left"], SPEEDS["a fast machine"], CFG)
    assert small.largest < 4096 and "more than an eighth of the 64 MiB free" in small.reason
    capped = et.plan_contexts(MEMORY["200 GiB free"], SPEEDS["a fast machine"], {**CONFIG, "max_position_embeddings": 300})
    assert capped.largest == 256


@pytest.fixture(scope="module")
def tiny_model():
    return Model.random({**CONFIG, "num_hidden_layers": 1, "vocab_size": 64, "hidden_size": 32,
                         "intermediate_size": 48, "max_position_embeddings": 1024}, seed=0)


def test_the_measurements_run_and_leave_their_caches_as_they_found_them(tiny_model):
    cal = et.calibrate(tiny_model, tokens=(16, 64), repeats=1)
    assert cal.product_rate > 0 and cal.score_seconds > 0 and cal.step_seconds > 0
    prompts = et.random_prompts(tiny_model.config, [5, 9, 3], seed=2)
    times = et.prefill_times(tiny_model, prompts, repeats=1)
    assert set(times) == {"ragged", "padded"} and all(t > 0 for t in times.values())
    steps = et.step_times_by_batch(tiny_model, prompts, repeats=2)
    assert len(steps) == 3 and all(math.isfinite(t) and t > 0 for t in steps)
    by_context = et.step_times_by_context(tiny_model, [4, 8], repeats=2)
    assert by_context["contexts"] == [4, 8] and len(by_context["cached"]) == len(by_context["recompute"]) == 2
    with pytest.raises(ValueError, match="at least 2 tokens"):
        et.step_times_by_context(tiny_model, [1])


def test_random_prompts_are_fixed_by_their_seed():
    a = et.random_prompts(CFG, [3, 5], seed=4)
    b = et.random_prompts(CONFIG, [3, 5], seed=4)
    assert [len(p) for p in a] == [3, 5] and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert all(p.max() < 1024 and p.min() >= 0 for p in a)


def test_the_step_weights_are_every_layer_s_four_products_and_the_output_layer(tiny_model):
    weights = et.step_weights(tiny_model)
    assert len(weights) == 4 * tiny_model.config.num_hidden_layers + 1
    assert weights[0] is tiny_model.layers[0].wqkv and weights[3] is tiny_model.layers[0].w_down
    assert weights[-1] is tiny_model.lm_head


def test_product_times_by_rows_times_each_row_count(tiny_model):
    times = et.product_times_by_rows(tiny_model, [3, 2, 1], repeats=2)
    assert len(times) == 3 and all(math.isfinite(t) and t > 0 for t in times)
