"""lessons.fewer_steps and lessons.speculative_sampling, what chapter 15 computes beside the engine:
the formula by hand, the rounds planned for machines of any speed, the rollback story's counts,
the ragged batch's records against greedy, the timing helper's shape, and the sampling rule's
first token distributed as p (the rule against a brute-force sum over every draft and uniform)."""
import math

import numpy as np
import pytest

from kvcache.generate import greedy
from lessons import fewer_steps as fs
from lessons.speculative_sampling import acceptance_probability, first_token_frequencies, speculative_accept


def test_expected_tokens_per_pass_by_hand():
    assert fs.expected_tokens_per_pass(0.0, 10) == 1.0
    assert fs.expected_tokens_per_pass(1.0, 10) == 11.0
    assert fs.expected_tokens_per_pass(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert fs.expected_tokens_per_pass(0.8, 4) == pytest.approx(sum(0.8 ** i for i in range(5)))


@pytest.mark.parametrize("first, budget, rounds", [(0.5, 5.0, 3), (2.0, 5.0, 2), (4.0, 5.0, 1), (60.0, 5.0, 1),
                                                   (0.0, 5.0, 3), (1e-6, 5.0, 3)])
def test_the_rounds_fit_the_budget_on_fast_and_slow_machines(first, budget, rounds):
    assert fs.plan_rounds(first, budget) == rounds


def test_the_weights_a_pass_reads():
    from kvcache.config import ModelConfig
    cfg = ModelConfig.from_dict(fs.SMALL_CONFIG)
    D, F, V, L = 32, 48, 12, 2
    layer = 2 * D * D + 2 * D * (D // 2) + 3 * D * F + 2 * D
    tied = 0 if cfg.tie_word_embeddings else V * D
    assert fs.weight_bytes(cfg) == 4 * (V * D + L * layer + D + tied)


def test_a_pass_of_each_size_is_timed_over_the_same_cache():
    model = fs.small_model()
    seconds = fs.pass_seconds(model, np.arange(7) % 12, [1, 2, 4], repeats=1)
    assert sorted(seconds) == [1, 2, 4] and all(t > 0 for t in seconds.values())
    seconds = fs.pass_seconds(model, np.arange(7) % 12, [1, 2, 4], repeats=1, first_row_only=True)
    assert sorted(seconds) == [1, 2, 4] and all(t > 0 for t in seconds.values())


def test_the_paged_rollback_story():
    states, intact = fs.paged_rollback_steps(fs.small_model())
    assert intact
    assert [s.used for s in states] == [2, 4, 3, 0] and states[-1].free == 12
    assert [s.lengths for s in states[:3]] == [[6, 6], [7, 10], [7, 7]]
    assert states[0].tables[0] == states[0].tables[1] and states[2].shared_refcount == 2


def test_the_ragged_batch_records_what_each_row_checked_and_kept():
    model = fs.small_model()
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 12, size=n) for n in (9, 5, 13)]
    stop = fs.mid_batch_eos(greedy(model, prompts, 20, None))
    assert stop is not None
    outputs, passes = fs.ragged_passes(model, prompts, 20, stop, num_draft_tokens=4, block_size=4)
    assert outputs == greedy(model, prompts, 20, stop)
    for p in passes:
        assert all(1 <= kept <= checked for kept, checked in zip(p["kept"], p["checked"]))
    # each pass keeps, per row, the last token and its accepted draft: the tokens after the
    # prefill's, one per pass for every row, the accepted drafts on top
    assert sum(sum(p["kept"]) for p in passes) == sum(len(o) - 1 for o in outputs)


def test_a_pass_is_priced_in_one_token_passes_between_the_sizes_measured():
    seconds = {1: 0.02, 2: 0.06, 4: 0.07, 8: 0.08, 16: 0.10}
    assert fs.pass_cost(1, seconds) == pytest.approx(1.0)
    assert fs.pass_cost(2, seconds) == pytest.approx(3.0)
    assert fs.pass_cost(3, seconds) == pytest.approx(3.25)              # halfway from 3 to 3.5
    assert fs.pass_cost(11, seconds) == pytest.approx(4.0 + 3 / 8)      # 3/8 of the way from 4 to 5
    assert fs.pass_cost(20, seconds) == pytest.approx(5.0)              # the last ratio, held


def test_a_policy_run_counts_its_drafts_and_prices_its_passes():
    run = fs.PolicyRun("p", output=list(range(9)), checked=[1, 5, 1, 3, 1], kept=[1, 1, 1, 3, 1])
    assert (run.proposed, run.accepted, run.wasted_passes) == (6, 2, 1)
    seconds = {1: 1.0, 2: 2.0, 4: 2.0, 8: 3.0}
    assert run.cost(seconds) == pytest.approx(1 + 2.25 + 1 + 2 + 1)     # t(5) a quarter from 4 to 8
    assert run.speedup(seconds) == pytest.approx(8 / 7.25)
    # the wholly rejected pass of 5 priced at the first-row-only times: a quarter from 1.5 to 2.5
    rejected = {1: 1.0, 4: 1.5, 8: 2.5}
    assert run.cost(seconds, rejected) == pytest.approx(1 + 1.75 + 1 + 2 + 1)
    assert run.speedup(seconds, rejected) == pytest.approx(8 / 6.75)


def test_the_policies_give_greedys_tokens_and_the_engines_checks_fewer_draft_tokens():
    """On the small model, transformers' policy drafts from single recurring tokens; the engine's
    checks fewer draft tokens, and both give greedy's tokens."""
    model = fs.small_model()
    prompt = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
    expected = greedy(model, [prompt], 24, None)[0]
    every, engine = (fs.policy_passes(model, name, prompt, None, 24, num_draft_tokens=4) for name in fs.POLICIES)
    assert every.output == engine.output == expected
    assert sum(every.kept) == sum(engine.kept) == len(expected) - 1
    assert engine.proposed < every.proposed
    assert list(fs.POLICIES.values())[0] == {"min_ngram": 1, "max_skip": 0}


def test_mid_batch_eos_ends_some_rows_and_not_others():
    assert fs.mid_batch_eos([[1, 2, 3, 4], [1, 2, 5, 6]]) in (3, 4, 5, 6)
    assert fs.mid_batch_eos([[1, 2], [1, 2]]) is None


def exact_first_token(q, p):
    """P(first token = y) by the rule, summed over every draft x (weight q(x)): kept with
    min(1, p(x)/q(x)), else the leftover max(0, p - q) normalised."""
    out = np.zeros(len(p))
    for x in range(len(q)):
        keep = min(1.0, p[x] / q[x]) if q[x] else 0.0
        out[x] += q[x] * keep
        r = np.maximum(0.0, p - q)
        if r.sum():
            out += q[x] * (1 - keep) * r / r.sum()
    return out


def test_the_rule_keeps_p_exactly_by_brute_force_and_empirically():
    q = np.array([0.40, 0.30, 0.15, 0.10, 0.05])
    p = np.array([0.10, 0.35, 0.30, 0.05, 0.20])
    np.testing.assert_allclose(exact_first_token(q, p), p, atol=1e-15)
    assert acceptance_probability(q, p) == pytest.approx(0.65)
    freq = first_token_frequencies(q, p, 20_000, draw=1)
    assert np.abs(freq - p).max() < 5 * math.sqrt(0.25 / 20_000)


def test_the_rule_on_one_hot_distributions_is_greedy():
    V = 6
    q = np.eye(V)[[2, 4]]
    p = np.eye(V)[[2, 1, 5]]
    assert speculative_accept(np.array([2, 4]), q, p, np.array([0.3, 0.3, 0.9])) == [2, 1]
    p = np.eye(V)[[2, 4, 5]]
    assert speculative_accept(np.array([2, 4]), q, p, np.array([0.3, 0.3, 0.9])) == [2, 4, 5]
