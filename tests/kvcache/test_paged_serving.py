"""The serving loop and prefix sharing.

Every request of a served workload must get the tokens it gets alone (greedy decoding of one
prompt, contiguous cache), whatever arrived beside it, whatever was preempted, whatever was
shared.  Prefix sharing must never hand a request a block whose tokens differ from its own,
even when block names collide (a hash made weak on purpose).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvcache.generate import greedy
from kvcache.model import Model
from kvcache.paged import OutOfBlocks, PagedKVCache, blocks_for
from kvcache.prefix import PrefixIndex, chain_hash
from kvcache.serving import Request, serve

CONFIG = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=160)
MODEL = Model.random(CONFIG, seed=5, dtype=np.float64)
V = CONFIG["vocab_size"]


def workload(n, seed=0, system=0, arrivals=True):
    """n requests of varied prompt and output lengths, arriving over the first steps; with
    ``system`` > 0 every prompt starts with the same ``system`` tokens."""
    rng = np.random.default_rng(seed)
    head = list(rng.integers(0, V, system))
    out = []
    for i in range(n):
        prompt = head + list(rng.integers(0, V, int(rng.integers(1, 30))))
        out.append(Request(prompt, int(rng.integers(1, 20)), eos_token_id=int(rng.integers(0, V)) if i % 3 == 0
                           else None, arrival=int(rng.integers(0, 12)) if arrivals else 0))
    return out


def alone(requests):
    return [greedy(MODEL, [r.prompt], r.max_new_tokens, r.eos_token_id)[0] for r in requests]


def test_every_request_gets_the_tokens_it_gets_alone():
    requests = workload(14, seed=1)
    result = serve(MODEL, requests, block_size=4)
    assert result.outputs == alone(requests)
    steps = result.steps
    assert sum(s.admitted for s in steps) == len(requests) and sum(s.finished for s in steps) == len(requests)
    assert result.preemptions == 0
    assert all(s.blocks_used <= result.num_blocks and 0 <= s.kv_waste < 1 for s in steps)
    # arrivals: nothing runs before the first request arrives, and each request joins on or after its step
    first = min(r.arrival for r in requests)
    assert all(s.running == 0 for s in steps[:first]) and steps[first].running > 0
    assert result.tokens_generated == sum(len(o) for o in result.outputs) > 0


def test_paging_wastes_at_most_the_last_block_of_each_sequence():
    requests = workload(10, seed=2, arrivals=False)
    result = serve(MODEL, requests, block_size=8)
    for s in result.steps:
        if s.running:
            # the positions reserved beyond the tokens: less than one block per running sequence
            assert s.blocks_used * 8 - s.tokens_cached < 8 * s.running


def test_preallocation_policies_hold_what_a_contiguous_cache_holds():
    requests = workload(12, seed=3, arrivals=False)
    runs = {policy: serve(MODEL, requests, block_size=4, reserve=policy, max_len=150)
            for policy in ("blocks", "request", "max_len")}
    want = alone(requests)
    assert all(r.outputs == want for r in runs.values())
    waste = {policy: r.kv_waste for policy, r in runs.items()}
    assert waste["blocks"] < waste["request"] < waste["max_len"]
    for s in runs["max_len"].steps:              # L_max = 150 reserved for each running sequence
        assert s.blocks_used == s.running * blocks_for(150, 4)


def test_the_same_memory_runs_more_sequences_at_once_when_paged():
    requests = workload(16, seed=4, arrivals=False)
    budget = 2 * blocks_for(150, 4)              # room for 2 sequences preallocated to 150 positions
    paged = serve(MODEL, requests, block_size=4, num_blocks=budget, max_len=150)
    preallocated = serve(MODEL, requests, block_size=4, num_blocks=budget, reserve="max_len", max_len=150)
    assert paged.outputs == preallocated.outputs == alone(requests)
    assert preallocated.peak_running == 2
    assert paged.mean_running > 2 * preallocated.mean_running
    assert len(paged.steps) < len(preallocated.steps)


def test_a_tight_pool_preempts_the_newest_and_changes_no_token():
    requests = workload(12, seed=5, arrivals=False)
    longest = max(blocks_for(len(r.prompt) + r.max_new_tokens - 1, 4) for r in requests)
    rows_of = []
    result = serve(MODEL, requests, block_size=4, num_blocks=longest + 2,
                   on_step=lambda stats, rows, tokens, kv: rows_of.append(rows))
    assert result.preemptions > 0 and result.outputs == alone(requests)
    ran = [s for s in result.steps if s.running]
    for stats, before, after in zip(ran[1:], rows_of, rows_of[1:]):
        if stats.preempted:                      # the victims were the newest rows of the step before
            gone = [r for r in before if r not in after and r in result.preempted_requests]
            assert gone and all(before.index(g) >= len(before) - stats.preempted - stats.finished for g in gone)
    # recomputation costs prefill: more prompt tokens computed than the prompts hold
    assert result.prefill_tokens > sum(len(r.prompt) for r in requests)
    with pytest.raises(OutOfBlocks, match="preempt=False"):
        serve(MODEL, requests, block_size=4, num_blocks=longest + 2, preempt=False)


def test_a_request_that_can_never_fit_is_refused_before_the_first_step():
    requests = workload(3, seed=6) + [Request(list(range(40)), 30)]
    with pytest.raises(OutOfBlocks, match="request 3 \\(40 prompt tokens \\+ 30 new\\) can never fit"):
        serve(MODEL, requests, block_size=4, num_blocks=10)
    with pytest.raises(OutOfBlocks, match="can never fit"):
        serve(MODEL, workload(3, seed=6), block_size=4, num_blocks=30, reserve="max_len", max_len=150)


def test_max_running_caps_the_batch():
    requests = workload(9, seed=7, arrivals=False)
    result = serve(MODEL, requests, block_size=4, max_running=3)
    assert result.peak_running == 3 and result.outputs == alone(requests)


# ---------------------------------------------------------------------- prefix sharing


def test_a_shared_system_prompt_is_computed_once_and_changes_no_token():
    requests = workload(10, seed=8, system=37, arrivals=False)
    requests = [Request(r.prompt, r.max_new_tokens, r.eos_token_id, arrival=2 * i) for i, r in enumerate(requests)]
    plain = serve(MODEL, requests, block_size=4)
    shared = serve(MODEL, requests, block_size=4, prefix_sharing=True)
    assert shared.outputs == plain.outputs == alone(requests)
    # the 37 shared tokens are 9 full blocks: every request after the first finds them
    stats = shared.prefix
    assert stats.lookups == 10 and stats.blocks_hit >= 9 * 9
    assert shared.prefill_saved == stats.tokens_hit >= 9 * 36
    assert shared.prefill_tokens == plain.prefill_tokens - shared.prefill_saved
    assert stats.hit_rate == pytest.approx(stats.tokens_hit / sum(len(r.prompt) for r in requests))


def test_freed_blocks_stay_cached_until_evicted_least_recently_used_first():
    system = list(range(1, 17))                   # 4 blocks of 4
    first = serve(MODEL, [Request(system + [20], 2), Request(system + [21], 2, arrival=5)], block_size=4,
                  prefix_sharing=True)
    assert first.prefix.blocks_hit == 4           # the second request came after the first had finished
    # a pool so small that a long request in between evicts the cached prefix
    requests = [Request(system + [20], 2), Request(list(range(20, 49)) + [1], 3, arrival=4),
                Request(system + [21], 2, arrival=10)]
    evicted = serve(MODEL, requests, block_size=4, num_blocks=9, prefix_sharing=True)
    assert evicted.prefix.blocks_hit < 4 and evicted.outputs == alone(requests)


def test_lookups_compare_tokens_and_parents_not_only_hashes():
    kv = PagedKVCache(1, 0, 1, 2, 40, block_size=2, num_blocks=12)
    index = PrefixIndex(kv.pool, hash_fn=lambda parent, tokens: 0)      # every block collides
    a, b, c = [1, 2, 3, 4, 5, 6], [1, 2, 9, 9, 5, 6], [7, 7, 3, 4, 5, 6]
    for tokens in (a, b, c):
        row = kv.add_sequence([kv.allocator.allocate() for _ in range(3)], 6)
        index.register(kv.tables[row], tokens)
    ta, tb, tc = kv.tables
    assert len(index) == 8                       # b's first block holds a's: it stays out
    assert index.match(a + [0]) == ta and index.match(c + [0]) == tc
    assert index.match(b + [0]) == ta[:1] + tb[1:]
    # same tokens in the block, another parent: not shared ([3, 4] of c is not [3, 4] of a)
    assert index.match([7, 7, 3, 4, 0]) == tc[:2]
    assert index.match([1, 2, 3, 4, 5, 7]) == ta[:2]
    assert index.match([9, 9, 3, 4]) == []
    assert index.stats.collisions > 0
    index.check()
    # a block whose contents are replaced is forgotten, and so, through its version, is every
    # block registered under it
    kv.free(0)
    for _ in range(kv.num_free):
        kv.allocator.allocate()
    assert index.match(a) == [] and index.match(b) == [] and index.match(c) == tc
    index.check()


def test_colliding_names_never_share_a_block_whose_tokens_differ():
    requests = workload(12, seed=9, system=9, arrivals=False)
    requests = [Request(r.prompt, r.max_new_tokens, r.eos_token_id, arrival=i) for i, r in enumerate(requests)]
    want = alone(requests)
    for weak in (lambda parent, tokens: 0, lambda parent, tokens: sum(tokens) % 3,
                 lambda parent, tokens: hash(tokens[:1])):
        seen = []

        def check(stats, rows, tokens, kv, seen=seen):
            index = kv.pool.prefix
            index.check()
            for r, req in enumerate(rows):
                if r >= kv.batch:
                    continue
                held = list(requests[req].prompt)
                for i, b in enumerate(kv.tables[r][: len(held) // 4]):
                    if b in index._entry:
                        assert index._entry[b][2] == tuple(held[i * 4:(i + 1) * 4])
            seen.append(stats.step)
        result = serve(MODEL, requests, block_size=4, prefix_sharing=True, hash_fn=weak, on_step=check)
        assert result.outputs == want and seen
        assert result.prefix.blocks_hit >= 2 * 10 and result.prefix.collisions > 0


def test_a_cached_block_about_to_be_written_is_forgotten_first():
    kv = PagedKVCache(1, 0, 1, 2, 40, dtype="float64", compute_dtype=np.float64, block_size=2, num_blocks=6)
    index = PrefixIndex(kv.pool)
    row = kv.add_sequence()
    ones = np.ones((4, 1, 2))
    kv.append(row, [ones], [ones])
    index.register(kv.tables[row], [1, 2, 3, 4])
    assert len(index) == 2
    kv.crop(3)                                   # block 1 is partial again: the next write changes it
    kv.append(row, [2 * ones[:1]], [2 * ones[:1]])
    assert len(index) == 1 and index.match([1, 2, 3, 4]) == kv.tables[row][:1]
    with pytest.raises(ValueError, match="already has a prefix index"):
        PrefixIndex(kv.pool)


def test_chain_hash_is_deterministic_and_chained():
    assert chain_hash(None, (1, 2)) == chain_hash(None, (1, 2))
    assert chain_hash(chain_hash(None, (1, 2)), (3, 4)) != chain_hash(None, (3, 4))


@pytest.mark.parametrize("call, message", [
    (lambda: serve(MODEL, [[1, 2]]), "not a Request"),
    (lambda: serve(MODEL, [Request([], 3)]), "request 0: the prompt is empty"),
    (lambda: serve(MODEL, [Request([1, V], 3)]), "outside the vocabulary"),
    (lambda: serve(MODEL, [Request([1], -1)]), "max_new_tokens"),
    (lambda: serve(MODEL, [Request([1], 2, arrival=-1)]), "arrival"),
    (lambda: serve(MODEL, [Request([1], 2, eos_token_id=[])]), "empty list"),
    (lambda: serve(MODEL, [Request([1] * 150, 20)]), "max_position_embeddings"),
    (lambda: serve(MODEL, [Request([1], 2)], reserve="all"), "reserve must be"),
    (lambda: serve(MODEL, [Request([1] * 30, 2)], max_len=20), "passes max_len"),
    (lambda: serve(MODEL, [Request([1], 2)], block_size=0), "block_size"),
    (lambda: serve(MODEL, 7), "must be a list"),
])
def test_bad_requests_get_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------- measuring workloads


def test_the_bookkeeping_stand_in_allocates_exactly_as_the_model_does():
    """What serve allocates, admits and preempts depends on the lengths alone: with zeros for
    keys and values, every step's statistics are those of the model's run."""
    from kvcache.serving import BookkeepingModel
    requests = [Request(r.prompt, r.max_new_tokens, arrival=r.arrival) for r in workload(12, seed=11)]
    longest = max(blocks_for(len(r.prompt) + r.max_new_tokens - 1, 4) for r in requests)
    preempted = {}
    for options in ({}, {"num_blocks": longest + 3}, {"reserve": "request"}, {"prefix_sharing": True}):
        real = serve(MODEL, requests, block_size=4, **options)
        preempted[str(options)] = real.preemptions
        fake = serve(BookkeepingModel(CONFIG), requests, block_size=4, **options)
        fields = ("step", "running", "waiting", "admitted", "finished", "preempted", "blocks_used",
                  "tokens_cached", "prefill_tokens")
        assert [[getattr(s, f) for f in fields] for s in real.steps] == \
            [[getattr(s, f) for f in fields] for s in fake.steps], options
        assert [len(o) for o in fake.outputs] == [len(o) for o in real.outputs]
    assert preempted[str({"num_blocks": longest + 3})] > 0          # the tight pool did preempt


def test_sampled_requests_have_the_asked_means_and_fit():
    from kvcache.serving import sample_requests
    requests = sample_requests(4000, seed=1, vocab_size=V, max_len=2048)
    prompts = np.array([len(r.prompt) for r in requests])
    outputs = np.array([r.max_new_tokens for r in requests])
    assert abs(prompts.mean() - 161) < 0.1 * 161 and abs(outputs.mean() - 338) < 0.1 * 338
    assert prompts.min() >= 1 and outputs.min() >= 1 and (prompts + outputs).max() <= 2048
    assert np.median(outputs) < outputs.mean()                 # a long tail, as real answers have
    shared = sample_requests(20, seed=2, vocab_size=V, system_prompt=30, arrival_gap=5.0)
    assert len({tuple(r.prompt[:30]) for r in shared}) == 1
    arrivals = [r.arrival for r in shared]
    assert arrivals[0] == 0 and arrivals == sorted(arrivals) and arrivals[-1] > 20
    assert [len(r.prompt) for r in sample_requests(5, seed=3, vocab_size=V)] == \
        [len(r.prompt) for r in sample_requests(5, seed=3, vocab_size=V)]


def test_a_decode_step_is_timed_on_either_layout():
    from kvcache.serving import decode_step_seconds
    for kind in ("paged", "contiguous"):
        seconds = decode_step_seconds(MODEL, 3, 20, kind=kind, steps=2)
        assert 0 < seconds < 60
    with pytest.raises(ValueError, match="batch"):
        decode_step_seconds(MODEL, 0, 20)


def test_the_scheduler_is_serve_and_a_request_is_a_plain_frozen_record():
    from kvcache.serving import Scheduler
    r = Request([1, 2], 3, 4, 2)
    assert (r.eos_token_id, r.eos, r.arrival) == (4, 4, 2) and Request([1], 2, 7).eos == 7
    assert dataclasses.replace(r, arrival=5) == Request([1, 2], 3, eos_token_id=4, arrival=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.arrival = 3
    requests = [Request([1, 2, 3, 4, 5], 2), Request([1, 2, 3, 4, 6], 2, arrival=3)]
    result = Scheduler(MODEL, block_size=4, prefix_sharing=True).run(requests)
    assert result.hit_rate == result.prefix.hit_rate > 0 and result.prefill_saved == 4
    assert result.preemptions == sum(s.preempted for s in result.steps) == 0
    again = serve(MODEL, requests, block_size=4, prefix_sharing=True)
    assert again.outputs == result.outputs and again.prefill_per_request == result.prefill_per_request
